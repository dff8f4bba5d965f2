"""Budget actions at submit, through the workers' workload_submit and the registered check."""

from decimal import Decimal

import pytest
from django.utils import timezone

from billing.metering import hour_floor
from billing.models import RateCard
from billing.services import budget_create, budgets_evaluate, ledger_append
from billing.services.ledger import EntryDraft
from scheduling.models import WorkloadEvent
from scheduling.services import workload_submit

REQUEST = {"name": "sweep", "queue": "rd/vision", "priority_class": "training",
           "pods": [{"count": 1, "flavors": ["a100"], "gpus": 1}]}


@pytest.fixture
def spent_12(world):
    """12.00 EUR charged to cost center rd this hour (so within the current month and week)."""
    card = RateCard.objects.get(flavor=world["a100"], resource="gpu")
    ledger_append(drafts=[EntryDraft(
        hour=hour_floor(timezone.now()), cost_center_id=world["cc"].pk,
        team_id=world["team"].pk, team_name="vision", queue="rd/vision", workload_id=None,
        workload_name="", flavor="a100", kind="gpu_reserved", basis="allocation",
        quantity=Decimal("4.8"), unit=card.unit, rate_card_id=card.pk,
        rate_version=card.version, rate=card.rate, amount=Decimal("12.00"), currency="EUR",
    )])


def test_budget_at_100_percent_blocks_new_submissions_with_the_numbers(world, spent_12):
    budget_create(cost_center=world["cc"], amount=Decimal("10"), thresholds=[(100, "block")])
    assert workload_submit(user=world["user"], data={**REQUEST, "name": "before"},
                           nudge=False).reason_code != "BUDGET_EXCEEDED"
    budgets_evaluate()
    workload = workload_submit(user=world["user"], data=REQUEST, nudge=False)
    assert workload.state == "rejected"
    assert workload.reason_code == "BUDGET_EXCEEDED"
    assert "spent 12.00 of 10.00 EUR this month (120.0%)" in workload.reason_message
    assert WorkloadEvent.objects.filter(workload=workload, type="reason",
                                        code="BUDGET_EXCEEDED").count() == 1


def test_lower_action_imposes_batch_low(world, spent_12):
    budget_create(cost_center=world["cc"], amount=Decimal("12"), thresholds=[(100, "lower")])
    budgets_evaluate()
    workload = workload_submit(user=world["user"], data=REQUEST, nudge=False)
    assert workload.priority_class.name == "batch-low"
    assert WorkloadEvent.objects.filter(
        workload=workload, type="policy", message__contains="priority lowered to batch-low"
    ).exists()


def test_a_blocking_budget_refuses_a_session_extension_with_the_numbers(world, spent_12):
    from scheduling.models import EventCode, Node
    from scheduling.session_time import session_extend

    Node.objects.create(cluster=world["cluster"], name="bj-a100-0", flavor=world["a100"], gpus=8,
                        cpu=96, memory_gib=1024)
    session = workload_submit(user=world["user"], nudge=False, data={
        **REQUEST, "name": "lab", "interactive": True, "time_limit_s": 3600})
    assert session.state == "pending", session.reason_message
    assert session_extend(user=world["user"], workload=session, hours=1).time_limit_s == 7200
    budget_create(cost_center=world["cc"], amount=Decimal("10"), thresholds=[(100, "block")])
    budgets_evaluate()
    done = session_extend(user=world["user"], workload=session, hours=1)
    assert [code for code, _ in done.refused] == ["BUDGET_EXCEEDED"]
    assert "spent 12.00 of 10.00 EUR this month (120.0%)" in done.refused[0][1]
    assert "sessions may not be extended until" in done.refused[0][1]
    session.refresh_from_db()
    assert session.time_limit_s == 7200
    assert WorkloadEvent.objects.filter(workload=session,
                                        code=EventCode.EXTENSION_REFUSED).count() == 1
