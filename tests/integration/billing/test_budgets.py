"""Budgets: thresholds fire once per period, notify by mail, block or lower at submit."""

from datetime import timedelta
from decimal import Decimal

from django.core import mail

from billing.models import BudgetFiring
from billing.services import (
    budget_create,
    budget_submission_check,
    budgets_evaluate,
    charges_post_hour,
    usage_rollup_hour,
)
from scheduling.extensions import SubmissionContext
from tests.factories import TeamMembershipFactory, UserFactory

from .conftest import H, minutes

NOW = H + timedelta(hours=3)


def spend(admit, gpus, hour=H):
    admit(gpus=gpus, reserved=hour, running=hour, ended=hour + timedelta(hours=1))
    usage_rollup_hour(hour=hour, now=NOW, telemetry={})
    charges_post_hour(hour=hour, now=NOW)


def ctx(world):
    return SubmissionContext(user=world["user"], queue=world["leaf"], team=world["team"],
                             request={"name": "x"})


def test_thresholds_fire_once_and_notify(world, admit):
    lead = UserFactory(username="lead", email="lead@example.org")
    TeamMembershipFactory(team=world["team"], user=lead, role="lead")
    budget_create(cost_center=world["cc"], amount=Decimal("100"),
                  thresholds=[(50, "notify"), (80, "notify"), (100, "block")])
    spend(admit, 24)  # 24 GPU-hours x 2.50 = 60.00: 60%
    fired = budgets_evaluate(now=NOW)
    assert [f.threshold.percent for f in fired] == [50]
    assert fired[0].message.startswith(
        "Cost center rd: spent 60.00 of 100.00 EUR this month (60.0%), reaching the 50% "
    )
    assert len(mail.outbox) == 1
    assert sorted(mail.outbox[0].to) == ["finance@example.org", "lead@example.org"]
    assert budgets_evaluate(now=NOW) == []  # once per threshold
    assert budget_submission_check(ctx(world), now=NOW) is None
    spend(admit, 20, hour=H + timedelta(hours=1))  # +50.00 -> 110.00
    fired = budgets_evaluate(now=NOW)
    assert sorted(f.threshold.percent for f in fired) == [80, 100]
    assert budgets_evaluate(now=NOW) == []
    assert BudgetFiring.objects.count() == 3
    verdict = budget_submission_check(ctx(world), now=NOW)
    ((code, message),) = verdict.deny
    assert code == "BUDGET_EXCEEDED"
    assert "spent 110.00 of 100.00 EUR this month (110.0%)" in message
    assert "blocked" in message


def test_next_period_fires_again_and_raising_the_budget_lifts_a_block(world, admit):
    budget = budget_create(cost_center=world["cc"], amount=Decimal("10"),
                           thresholds=[(100, "block")])
    spend(admit, 8)  # 20.00
    assert len(budgets_evaluate(now=NOW)) == 1
    assert budget_submission_check(ctx(world), now=NOW).deny
    budget.amount = Decimal("50")
    budget.save()
    assert budget_submission_check(ctx(world), now=NOW) is None
    assert budgets_evaluate(now=NOW + timedelta(days=31)) == []  # April: nothing spent yet


def test_lower_to_batch_low(world, admit):
    budget_create(cost_center=world["cc"], amount=Decimal("10"),
                  thresholds=[(90, "lower")])
    spend(admit, 4)  # 10.00
    budgets_evaluate(now=NOW)
    verdict = budget_submission_check(ctx(world), now=NOW)
    assert verdict.deny == [] and verdict.priority_class == "batch-low"
    assert "priority lowered to batch-low" in verdict.audit[0]


def test_weekly_budget_period(world, admit):
    budget_create(cost_center=world["cc"], amount=Decimal("1"), period="weekly",
                  thresholds=[(100, "notify")])
    spend(admit, 1, hour=H - timedelta(days=1))  # Sunday 1 March: the previous week
    assert budgets_evaluate(now=NOW) == []
    spend(admit, 1, hour=H + minutes(0))  # Monday 2 March
    (f,) = budgets_evaluate(now=NOW)
    assert f.period_start == H.replace(hour=0) and "this week" in f.message


def test_month_end_forecast_from_run_rate_and_running_workloads(world, admit):
    from billing.selectors import budget_forecast

    now = H.replace(day=10, hour=12)  # 516 h to the end of March
    budget = budget_create(cost_center=world["cc"], amount=Decimal("1000"))
    done = now - timedelta(hours=5)
    admit(gpus=4, reserved=done, running=done, ended=done + timedelta(hours=1), name="done")
    usage_rollup_hour(hour=done, now=now, telemetry={})
    charges_post_hour(hour=done, now=now)  # 4 GPU-h x 2.50 = 10.00 in the last 24 h
    admit(gpus=8, reserved=now - timedelta(hours=2), running=now - timedelta(hours=2),
          name="long")  # 4 h duration hint: 2 h more at 8 x 2.50 = 40.00
    f = budget_forecast(budget, now)
    assert (f["spent"], f["committed"], f["run_rate_per_hour"]) == (
        Decimal("10.00"), Decimal("40.00"), Decimal("0.42"))
    assert f["forecast"] == Decimal("265.00")  # 10 + 40 + 10/24 x 516
