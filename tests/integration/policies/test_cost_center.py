"""The over-budget example end to end: `cost_center` read from billing's cost center, budget
and forecast; the denial names the numbers."""

from decimal import Decimal
from pathlib import Path

import pytest

from policies.services import policy_create
from policies.specs import read_file
from policies.submission import policy_submission_check
from scheduling.extensions import SubmissionContext

EXAMPLE = Path(__file__).resolve().parents[3] / "policies/examples/over-budget-no-new-work.yaml"


@pytest.fixture
def billing_selectors():
    selectors = pytest.importorskip("billing.selectors")
    if not hasattr(selectors, "cost_center_of") or not hasattr(selectors, "budget_forecast"):
        pytest.skip("billing's cost-center selectors have not landed yet")
    return selectors


def test_over_budget_denies_new_work(org, billing_selectors, monkeypatch):
    from billing.models import Budget, CostCenter, TeamCostCenter

    cc = CostCenter.objects.create(code="cc-rd", name="R&D", currency="EUR")
    TeamCostCenter.objects.create(team=org.teams["team-a"], cost_center=cc)
    Budget.objects.create(cost_center=cc, period="monthly", amount=Decimal("10000.00"),
                          currency="EUR")
    spent = {"value": Decimal("9500.00")}

    def forecast(budget, now=None):
        # The ledger's arithmetic is billing's (tested there); here only the wiring matters.
        assert budget.cost_center_id == cc.pk
        return {"spent": spent["value"], "forecast": spent["value"] + Decimal(800)}

    monkeypatch.setattr(billing_selectors, "budget_forecast", forecast)
    policy_create(user=org.admin, data={**read_file(EXAMPLE).policies[0], "mode": "enforce"})
    data = {"name": "sweep", "queue": "rd/team-a",
            "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 8}]}
    ctx = SubmissionContext(user=org.alice, queue=org.team_a, team=org.teams["team-a"],
                            request=data)
    assert policy_submission_check(ctx).deny == []
    spent["value"] = Decimal("10250.50")
    verdict = policy_submission_check(ctx)
    assert verdict.deny == [("POLICY_DENIED",
                             "cost center cc-rd has spent 10250.5 EUR of its 10000 EUR budget "
                             "this month: no new work until the budget is raised or the month "
                             "ends (policy over-budget-no-new-work)")]
    other = SubmissionContext(user=org.alice, queue=org.team_b, team=org.teams["team-b"],
                              request={**data, "queue": "rd/team-b"})
    assert policy_submission_check(other).deny == [], "team-b has no cost center"
