"""Budgets: spend per period, thresholds firing once, their actions, and the submission check."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import (
    Budget,
    BudgetAction,
    BudgetFiring,
    BudgetPeriod,
    BudgetThreshold,
    CostCenter,
    TeamCostCenter,
    round_money,
)

if TYPE_CHECKING:
    from billing.selectors.provisional import Spend

logger = logging.getLogger(__name__)

BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
MAX_PERCENT = 1000  # a threshold's percent of its budget (the API's bound too)
LOW_PRIORITY_CLASS = "batch-low"


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """The budget period holding `now`: the UTC month, or the UTC week from Monday."""
    now = now.astimezone(UTC)
    if period == BudgetPeriod.WEEKLY:
        start = (now - timedelta(days=now.weekday())).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        return start, start + timedelta(days=7)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = datetime(
        start.year + (start.month == 12), start.month % 12 + 1, 1, tzinfo=UTC
    )
    return start, end


def spent_in(cost_center_id: int, start: datetime, end: datetime, *,
             now: datetime | None = None) -> Decimal:
    """What a cost center spent in [start, end): billed plus provisional
    (`billing.selectors.provisional.cost_center_spend`, the figure every budget shows)."""
    return spend_in(cost_center_id, start, end, now=now).spent


def spend_in(cost_center_id: int, start: datetime, end: datetime, *,
             now: datetime | None = None) -> Spend:
    """A cost center's spend in [start, end), billed and provisional apart."""
    from billing.selectors.provisional import cost_center_spend

    return cost_center_spend(cost_center_id, start, end, now=now or timezone.now())


def _percent(spent: Decimal, amount: Decimal) -> Decimal:
    if not amount:
        return Decimal(0)
    return (spent * 100 / amount).quantize(Decimal("0.1"))


def budget_message(budget: Budget, spent: Decimal, threshold: BudgetThreshold,
                   provisional: Decimal = Decimal(0)) -> str:
    """The human text of a threshold reached, with the numbers (and the provisional part of
    the spend, metered since the last hourly rollup, when there is one)."""
    word = "month" if budget.period == BudgetPeriod.MONTHLY else "week"
    part = (f", of which {provisional} {budget.currency} metered since the last hourly "
            "rollup (provisional)") if provisional else ""
    return (
        f"Cost center {budget.cost_center.code}: spent {spent} of {budget.amount} "
        f"{budget.currency} this {word} ({_percent(spent, budget.amount)}%{part}), reaching "
        f"the {threshold.percent}% threshold ({threshold.get_action_display()})"
    )


@transaction.atomic
def budget_create(
    *,
    cost_center: CostCenter,
    amount: Decimal,
    period: str = BudgetPeriod.MONTHLY,
    thresholds: list[tuple[int, str]] | None = None,
) -> Budget:
    """A budget with its thresholds, e.g. [(50, "notify"), (80, "notify"), (100, "block")]."""
    if period not in BudgetPeriod.values:
        raise ValidationError({"period": [f"unknown period {period!r}"]})
    if Decimal(amount) <= 0:
        raise ValidationError({"amount": [f"a budget must be positive (got {amount})"]})
    thresholds = thresholds or [(50, "notify"), (80, "notify"), (100, "block")]
    _check_thresholds(thresholds)
    existing = Budget.objects.filter(cost_center=cost_center, period=period).first()
    if existing is not None:
        raise _duplicate(existing)
    try:
        with transaction.atomic():  # two at once: the unique constraint decides
            budget = Budget.objects.create(
                cost_center=cost_center, period=period, amount=round_money(Decimal(amount)),
                currency=cost_center.currency,
            )
    except IntegrityError:
        raise _duplicate(Budget.objects.get(cost_center=cost_center, period=period)) from None
    for percent, action in thresholds:  # one by one: each save is recorded in the history
        BudgetThreshold.objects.create(budget=budget, percent=int(percent), action=action)
    return budget


def _duplicate(existing: Budget) -> ValidationError:
    return ValidationError({"period": [
        f"cost center {existing.cost_center.code} already has a {existing.period} budget "
        f"(#{existing.pk}, {existing.amount} {existing.currency}): one per cost center and "
        "period"]})


def _check_thresholds(thresholds: list[tuple[int, str]]) -> None:
    seen: set[tuple[int, str]] = set()
    for percent, action in thresholds:
        if action not in BudgetAction.values or int(percent) < 1 or int(percent) > MAX_PERCENT:
            raise ValidationError({"thresholds": [
                f"bad threshold {percent}% {action!r}: a percent from 1 to {MAX_PERCENT} and "
                f"an action ({', '.join(BudgetAction.values)})"]})
        if (int(percent), action) in seen:
            raise ValidationError({"thresholds": [f"{percent}% {action} is listed twice"]})
        seen.add((int(percent), action))


def _recipients(cost_center: CostCenter) -> list[str]:
    from quotas.models import TeamMembership, TeamRole

    emails = {cost_center.contact_email} if cost_center.contact_email else set()
    team_ids = TeamCostCenter.objects.filter(cost_center=cost_center).values("team_id")
    emails |= set(
        TeamMembership.objects.filter(team_id__in=team_ids, role=TeamRole.LEAD)
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    return sorted(emails)


def budgets_evaluate(*, now: datetime | None = None) -> list[BudgetFiring]:
    """Fire every threshold reached this period that has not fired yet (each fires once).

    A threshold compares the spend the budget page shows: billed plus provisional (metered
    since the last hourly rollup), so it fires as soon as work in progress reaches it, not an
    hour later; the message says how much of the spend is provisional (docs/api.md,
    "Budgets")."""
    now = now or timezone.now()
    fired: list[BudgetFiring] = []
    budgets = Budget.objects.filter(active=True).select_related("cost_center")
    for budget in budgets.prefetch_related("thresholds"):
        start, end = period_bounds(budget.period, now)
        spend = spend_in(budget.cost_center_id, start, end, now=now)
        spent = spend.spent
        for threshold in budget.thresholds.all():
            if spent < budget.amount * threshold.percent / 100:
                continue
            firing = _fire(budget, threshold, start, end, spend, now)
            if firing is not None:
                fired.append(firing)
    return fired


def _fire(
    budget: Budget, threshold: BudgetThreshold, start: datetime, end: datetime,
    spend: Spend, now: datetime,
) -> BudgetFiring | None:
    spent = spend.spent
    message = budget_message(budget, spent, threshold, spend.provisional)
    try:
        with transaction.atomic():
            firing = BudgetFiring.objects.create(
                threshold=threshold, period_start=start, period_end=end, spent=spent,
                budget_amount=budget.amount, message=message, fired_at=now,
            )
    except IntegrityError:
        return None  # already fired this period (the unique constraint decides, not a read)
    if threshold.action == BudgetAction.NOTIFY:
        recipients = _recipients(budget.cost_center)
        if recipients:
            sent = send_mail(
                subject=f"[Allot] budget {threshold.percent}% reached: "
                f"{budget.cost_center.code}",
                message=message, from_email=settings.DEFAULT_FROM_EMAIL,
                recipient_list=recipients, fail_silently=True,
            )
            firing.notified = sent * len(recipients)
            firing.save(update_fields=["notified"])
    logger.info("budget threshold fired: %s", message)
    return firing


def active_firings(cost_center_id: int, now: datetime) -> list[BudgetFiring]:
    """Firings of the current periods of a cost center's budgets (what is in force now)."""
    out = []
    qs = BudgetFiring.objects.filter(
        threshold__budget__cost_center_id=cost_center_id, threshold__budget__active=True,
        period_start__lte=now, period_end__gt=now,
    ).select_related("threshold__budget__cost_center")
    spent_by_period: dict[tuple[datetime, datetime], Decimal] = {}
    for firing in qs:
        budget = firing.threshold.budget
        # A budget raised since the firing lifts it once spend is below the threshold again
        # (so does a provisional amount the rollup priced lower). One read per period.
        period = (firing.period_start, firing.period_end)
        if period not in spent_by_period:
            spent_by_period[period] = spent_in(budget.cost_center_id, *period, now=now)
        spent = spent_by_period[period]
        if spent >= budget.amount * firing.threshold.percent / 100:
            out.append(firing)
    return out


def cost_center_of_team(team) -> CostCenter | None:
    """The team's cost center, or the default one."""
    if team is not None:
        link = TeamCostCenter.objects.select_related("cost_center").filter(team=team).first()
        if link is not None:
            return link.cost_center
    return CostCenter.objects.filter(is_default=True).first()


_IN_FORCE_SQL = (
    "SELECT EXISTS (SELECT 1 FROM billing_budgetfiring f"
    " JOIN billing_budgetthreshold t ON t.id = f.threshold_id"
    " JOIN billing_budget b ON b.id = t.budget_id"
    " WHERE b.active AND f.period_start <= %s AND f.period_end > %s)"
)
# The periods of active budgets' firings not over yet: whether one is in force at a later time
# is answered from these (time only moves on), until a budget table changes.
_PERIODS_SQL = (
    "SELECT f.period_start, f.period_end FROM billing_budgetfiring f"
    " JOIN billing_budgetthreshold t ON t.id = f.threshold_id"
    " JOIN billing_budget b ON b.id = t.budget_id"
    " WHERE b.active AND f.period_end > %s"
)


def _any_firing_in_force(now: datetime) -> bool:
    """Whether any active budget has a firing in its current period (plain SQL through the
    submission's prepared-statement cursor: it runs on every submission). On PostgreSQL the
    periods are cached per thread until a budget table changes (the policies' change log): a
    warm submission reads nothing here."""
    from core import changes
    from core.db import hot_cursor

    view = changes.validate()
    if view is None:
        with hot_cursor() as cursor:
            cursor.execute(_IN_FORCE_SQL, [now, now])
            return bool(cursor.fetchone()[0])

    def load() -> tuple[datetime, list[tuple[datetime, datetime]]]:
        with hot_cursor() as cursor:
            cursor.execute(_PERIODS_SQL, [now])
            return now, [(start, end) for start, end in cursor.fetchall()]

    loaded_at, periods = view.get("budget", "firing periods", load)
    if now < loaded_at:  # a clock set back (tests pass `now`): the cached rows may miss some
        loaded_at, periods = load()
    return any(start <= now < end for start, end in periods)


def budget_submission_check(ctx, *, now: datetime | None = None):
    """Deny (BUDGET_EXCEEDED) or lower to batch-low while a budget action is in force.

    `ctx` is a scheduling.extensions.SubmissionContext; `now` is for tests.
    """
    from scheduling.extensions import SubmissionVerdict

    now = now or timezone.now()
    # Usually no budget action is in force anywhere: one cheap query, on every submission.
    if not _any_firing_in_force(now):
        return None
    cc = cost_center_of_team(ctx.team)
    if cc is None:
        return None
    verdict = SubmissionVerdict()
    for firing in active_firings(cc.pk, now):
        budget = firing.threshold.budget
        start, end = firing.period_start, firing.period_end
        spend = spend_in(cc.pk, start, end, now=now)
        text = budget_message(budget, spend.spent, firing.threshold, spend.provisional)
        if firing.threshold.action == BudgetAction.BLOCK:
            verdict.deny.append((
                BUDGET_EXCEEDED,
                f"{text}: new submissions are blocked until {end:%Y-%m-%d} or the budget is "
                "raised",
            ))
        elif firing.threshold.action == BudgetAction.LOWER_PRIORITY:
            verdict.priority_class = LOW_PRIORITY_CLASS
            verdict.audit.append(f"{text}: priority lowered to {LOW_PRIORITY_CLASS}")
    if not verdict.deny and not verdict.priority_class:
        return None
    return verdict


def budget_extension_check(workload, extra_s: int, now: datetime) -> list[tuple[str, str]]:
    """Refuse (BUDGET_EXCEEDED) a session's time-limit extension while a budget blocking new
    work is in force for its team's cost center (a scheduling.extensions session check)."""
    if not _any_firing_in_force(now):
        return []
    cc = cost_center_of_team(workload.team)
    if cc is None:
        return []
    out = []
    for firing in active_firings(cc.pk, now):
        if firing.threshold.action != BudgetAction.BLOCK:
            continue
        spent = spent_in(cc.pk, firing.period_start, firing.period_end)
        text = budget_message(firing.threshold.budget, spent, firing.threshold)
        out.append((BUDGET_EXCEEDED, f"{text}: sessions may not be extended until "
                    f"{firing.period_end:%Y-%m-%d} or the budget is raised"))
    return out
