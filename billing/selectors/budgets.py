"""Budgets as read: a team's month to date, forecasts, standing against thresholds, the banner."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from billing.metering import exact_hours, hour_floor
from billing.models import (
    Budget,
    BudgetAction,
    BudgetFiring,
    LedgerEntry,
    TeamCostCenter,
    UsageRecord,
    round_money,
    round_quantity,
)
from billing.selectors.access import is_admin, visible_team_ids
from billing.selectors.cost_centers import cost_center_of, default_currency
from billing.selectors.provisional import team_provisional
from billing.selectors.rates import admission_hourly_cost
from billing.services.budgets import active_firings, budget_message, period_bounds, spend_in
from billing.services.usage import admission_shapes, rate_versions


def team_month_to_date(team, now: datetime | None = None) -> dict[str, Any]:
    """A team's spend this month, its GPU-hours, and its cost center's budget standing."""
    now = now or timezone.now()
    start, end = period_bounds("monthly", now)
    entries = LedgerEntry.objects.filter(team=team, hour__gte=start, hour__lt=end)
    billed = round_money(Decimal(entries.aggregate(t=Sum("amount"))["t"] or 0))
    # What runs now (and ran since the last rollup) counts at once, marked provisional.
    provisional = team_provisional(team, since=start, now=now)
    spent = round_money(billed + provisional.cost)
    frozen = round_money(Decimal(entries.filter(
        kind__in=["gpu_frozen", "cpu_frozen", "memory_frozen"]).aggregate(
        t=Sum("amount"))["t"] or 0))
    records = UsageRecord.objects.filter(team=team, hour__gte=start, hour__lt=end)
    gpu = round_quantity(Decimal(
        records.filter(phase="running").aggregate(t=Sum("gpu_hours"))["t"] or 0))
    cc = cost_center_of(team)
    budget = Budget.objects.filter(cost_center=cc, active=True).first() if cc else None
    return {
        "team": team.name, "spent": spent, "frozen_cost": frozen,
        "gpu_hours": gpu + provisional.gpu_hours,
        "billed": billed, "provisional": provisional.cost, "as_of": now,
        "currency": cc.currency if cc else default_currency(),
        "cost_center": cc.code if cc else None, "month": f"{start:%Y-%m}",
        "budget": budget_status(budget, now) if budget else None,
    }


def budget_forecast(budget: Budget, now: datetime | None = None) -> dict[str, Any]:
    """End-of-period forecast: spend so far + running workloads' remaining hours + run rate.

    Spend so far (`spent`) is `billed` (the ledger) plus `provisional` (metered since the last
    hourly rollup, `cost_center_spend`): the figure the dashboard's month to date and the
    usage rows add up the same way.

    Running workloads add their hourly cost for the hours their duration hint still needs
    (or to the period's end without a hint); the rest of the period adds the run rate of the
    other work seen in the last 24 h.
    """
    from scheduling.models import Admission

    now = now or timezone.now()
    start, end = period_bounds(budget.period, now)
    spend = spend_in(budget.cost_center_id, start, end, now=now)
    spent = spend.spent
    teams = list(TeamCostCenter.objects.filter(cost_center=budget.cost_center_id)
                 .values_list("team_id", flat=True))
    hours_left = max(exact_hours(end - now), Decimal(0))
    committed = Decimal(0)
    running_ids = set()
    admissions = Admission.objects.filter(
        ended_at__isnull=True, workload__team_id__in=teams
    ).select_related("workload", "flavor")
    rates = rate_versions()
    open_admissions = list(admissions)
    shapes = admission_shapes(open_admissions)
    for adm in open_admissions:
        running_ids.add(adm.workload_id)
        per_hour, _ = admission_hourly_cost(adm, rates, now, shapes.get(adm.pk))
        hint = adm.workload.duration_hint_s
        if hint:
            ran = exact_hours(now - (adm.running_at or now)) + Decimal(
                str(adm.workload.progress_s or 0)) / 3600
            remaining = max(Decimal(hint) / 3600 - ran, Decimal(0))
        else:
            remaining = hours_left
        committed += per_hour * min(remaining, hours_left)
    day_ago = max(hour_floor(now) - timedelta(hours=24), start)
    recent = LedgerEntry.objects.filter(
        cost_center=budget.cost_center_id, hour__gte=day_ago
    ).exclude(workload_id__in=running_ids).aggregate(t=Sum("amount"))["t"]
    recent = Decimal(recent or 0)
    span = exact_hours(hour_floor(now) - day_ago)
    run_rate = recent / span if span > 0 else Decimal(0)
    forecast = round_money(spent + committed + run_rate * hours_left)
    return {"spent": spent, "billed": spend.billed, "provisional": spend.provisional,
            "as_of": now, "committed": round_money(committed),
            "run_rate_per_hour": round_money(run_rate), "forecast": forecast,
            "period_start": start, "period_end": end}


def budget_status(budget: Budget, now: datetime | None = None) -> dict[str, Any]:
    """A budget with its spend, percentage, forecast and thresholds (fired or not)."""
    now = now or timezone.now()
    f = budget_forecast(budget, now)
    fired = set(BudgetFiring.objects.filter(
        threshold__budget=budget, period_start=f["period_start"]
    ).values_list("threshold_id", flat=True))
    percent = (f["spent"] * 100 / budget.amount).quantize(Decimal("0.1")) if budget.amount \
        else Decimal(0)
    return {
        "id": budget.pk, "cost_center": budget.cost_center.code, "period": budget.period,
        "amount": budget.amount, "currency": budget.currency, "percent": percent,
        **f,
        "thresholds": [
            {"percent": t.percent, "action": t.action, "fired": t.pk in fired}
            for t in budget.thresholds.all()
        ],
    }


def budget_banner(user, now: datetime | None = None) -> dict[str, str] | None:
    """The banner for the portal: the strongest budget action in force for the user's teams."""
    if not user.is_authenticated:
        return None
    now = now or timezone.now()
    team_ids = visible_team_ids(user) or set()
    if is_admin(user):
        return None
    ccs = set(TeamCostCenter.objects.filter(team_id__in=team_ids)
              .values_list("cost_center_id", flat=True))
    firings: list[BudgetFiring] = []
    for cc in ccs:
        firings.extend(active_firings(cc, now))
    if not firings:
        return None
    rank: dict[str, int] = {
        BudgetAction.BLOCK: 3, BudgetAction.LOWER_PRIORITY: 2, BudgetAction.NOTIFY: 1,
    }
    top = max(firings, key=lambda f: (rank[f.threshold.action], f.threshold.percent))
    level = "danger" if top.threshold.action == BudgetAction.BLOCK else "warning"
    # Today's spend, not the firing's: the banner reads what the budget page reads.
    budget = top.threshold.budget
    spend = spend_in(budget.cost_center_id, top.period_start, top.period_end, now=now)
    return {"level": level, "message": budget_message(budget, spend.spent, top.threshold,
                                                      spend.provisional)}
