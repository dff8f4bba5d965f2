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
    # Spent: 10.00 billed + the 2 h "long" ran, not rolled up yet: 8 x 2.50 x 2 = 40.00.
    assert (f["spent"], f["billed"], f["provisional"]) == (
        Decimal("50.00"), Decimal("10.00"), Decimal("40.00"))
    assert (f["committed"], f["run_rate_per_hour"]) == (Decimal("40.00"), Decimal("0.42"))
    assert f["forecast"] == Decimal("305.00")  # 50 + 40 + 10/24 x 516


def test_thresholds_count_provisional_spend_once_before_and_after_the_rollup(world, admit):
    """Work in progress counts toward a budget before the hourly rollup prices it (billed +
    provisional, the budget page's figure): a block fires on it, and when the rollup bills the
    hour the spend stays the same (the billed part replaces the provisional one)."""
    from billing.selectors import budget_status

    budget = budget_create(cost_center=world["cc"], amount=Decimal("100"),
                           thresholds=[(50, "notify"), (100, "block")])
    admit(gpus=16, reserved=H, running=H, name="big")  # 16 x 2.50 = 40.00 an hour, open
    at = H + minutes(90)  # 60.00 so far, nothing rolled up
    (fired,) = budgets_evaluate(now=at)
    assert (fired.threshold.percent, fired.spent) == (50, Decimal("60.00"))
    assert "(60.0%, of which 60.00 EUR metered since the last hourly rollup (provisional))" in (
        fired.message)
    before = budget_status(budget, at)
    assert (before["spent"], before["billed"], before["provisional"]) == (
        Decimal("60.00"), Decimal("0.00"), Decimal("60.00"))
    usage_rollup_hour(hour=H, now=at, telemetry={})
    charges_post_hour(hour=H, now=at)
    after = budget_status(budget, at)
    assert (after["spent"], after["billed"], after["provisional"]) == (
        Decimal("60.00"), Decimal("40.00"), Decimal("20.00"))
    assert budgets_evaluate(now=at) == []  # the same spend: nothing new
    assert budget_submission_check(ctx(world), now=at) is None
    later = H + minutes(150)  # 100.00: the block fires on 60.00 provisional
    (block,) = budgets_evaluate(now=later)
    assert (block.threshold.action, block.spent) == ("block", Decimal("100.00"))
    ((code, message),) = budget_submission_check(ctx(world), now=later).deny
    assert code == "BUDGET_EXCEEDED"
    assert "spent 100.00 of 100.00 EUR this month (100.0%, of which 60.00 EUR" in message


def test_the_default_cost_center_pays_for_teams_without_one(world, admit):
    """Provisional spend follows the rollup's rule: a team without a cost center is the
    default one's."""
    from billing.selectors.provisional import cost_center_spend
    from billing.services import cost_center_create
    from tests.factories import TeamFactory

    default = cost_center_create(code="org", name="Org", is_default=True)
    loose = TeamFactory(name="loose")
    admit(gpus=4, reserved=H, running=H, ended=H + minutes(30), name="l", team=loose)
    admit(gpus=8, reserved=H, running=H, ended=H + minutes(30), name="v")
    end = H + timedelta(days=1)
    assert cost_center_spend(default.pk, H, end, now=NOW).provisional == Decimal("5.00")
    assert cost_center_spend(world["cc"].pk, H, end, now=NOW).provisional == Decimal("10.00")
