"""Chart series: plain lists, turned into figures by billing/charts.py."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Sum
from django.db.models.functions import TruncDay
from django.utils import timezone
from django.utils.timezone import localtime

from billing.metering import exact_hours
from billing.models import Budget, LedgerEntry, RateCard, UsageRecord, round_money, round_quantity
from billing.selectors.access import narrow, visible_team_ids
from billing.selectors.budgets import budget_status
from billing.selectors.cost_centers import default_currency


def spend_by_team_daily(*, user, start: datetime, end: datetime) -> dict[str, Any]:
    """Daily spend per team."""
    qs = narrow(LedgerEntry.objects.filter(hour__gte=start, hour__lt=end), visible_team_ids(user))
    rows = qs.annotate(day=TruncDay("hour")).values("day", "team_name").annotate(
        a=Sum("amount")).order_by("day")
    days = sorted({r["day"] for r in rows})
    teams: dict[str, dict] = defaultdict(dict)
    for r in rows:
        teams[r["team_name"] or "(none)"][r["day"]] = r["a"]
    return {"days": days, "teams": {t: [float(v.get(d, 0)) for d in days]
                                    for t, v in sorted(teams.items())}}


def gpu_hours_daily(*, user, start: datetime, end: datetime) -> dict[str, Any]:
    """Daily reserved (running), frozen and active GPU-hours, and frozen cost."""
    team_ids = visible_team_ids(user)
    qs = narrow(UsageRecord.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    rows = qs.annotate(day=TruncDay("hour")).values("day", "phase").annotate(
        gpu=Sum("gpu_hours"), active=Sum("active_gpu_hours")).order_by("day")
    frozen_cost = narrow(LedgerEntry.objects.filter(
        hour__gte=start, hour__lt=end, kind__in=["gpu_frozen", "cpu_frozen", "memory_frozen"]),
        team_ids).annotate(day=TruncDay("hour")).values("day").annotate(a=Sum("amount"))
    days = sorted({r["day"] for r in rows})
    idx = {d: i for i, d in enumerate(days)}
    out = {"days": days, "reserved": [0.0] * len(days), "frozen": [0.0] * len(days),
           "active": [0.0] * len(days), "frozen_cost": [0.0] * len(days)}
    for r in rows:
        i = idx[r["day"]]
        if r["phase"] == "frozen":
            out["frozen"][i] += float(r["gpu"] or 0)
        else:
            out["reserved"][i] += float(r["gpu"] or 0)
            out["active"][i] += float(r["active"] or 0)
    for r in frozen_cost:
        if r["day"] in idx:
            out["frozen_cost"][idx[r["day"]]] = float(r["a"])
    return out


def idle_capacity_cost(*, start: datetime, end: datetime, now: datetime | None = None
                       ) -> list[dict[str, Any]]:
    """Per GPU flavor: installed GPU-hours (today's fleet over the window) minus allocated,
    priced at the current GPU rate: what idle capacity costs (admins only)."""
    from scheduling.models import Node

    now = now or timezone.now()
    # Each cluster counts from when it joined the fleet (today's nodes; no node history).
    inst_hours: dict[str, Decimal] = defaultdict(Decimal)
    rows = Node.objects.filter(gpus__gt=0, cluster__enabled=True).values(
        "flavor__name", "cluster__created_at").annotate(g=Sum("gpus"))
    for row in rows:
        since = max(start, row["cluster__created_at"])
        span = exact_hours(min(end, now) - since) if min(end, now) > since else Decimal(0)
        inst_hours[row["flavor__name"]] += Decimal(row["g"]) * span
    allocated = dict(UsageRecord.objects.filter(hour__gte=start, hour__lt=end).values(
        "flavor").annotate(g=Sum("gpu_hours")).values_list("flavor", "g"))
    out = []
    for flavor in sorted(inst_hours):
        inst = inst_hours[flavor]
        idle = max(inst - Decimal(allocated.get(flavor) or 0), Decimal(0))
        card = RateCard.objects.filter(flavor__name=flavor, resource="gpu",
                                       effective_from__lte=now).order_by("-effective_from").first()
        out.append({"flavor": flavor, "installed_gpu_hours": round_quantity(inst),
                    "allocated_gpu_hours": round_quantity(Decimal(allocated.get(flavor) or 0)),
                    "idle_gpu_hours": round_quantity(idle),
                    "idle_cost": round_money(idle * card.rate) if card else None,
                    "currency": card.currency if card else default_currency()})
    return out


def top_workloads(*, user, start: datetime, end: datetime, limit: int = 10
                  ) -> list[dict[str, Any]]:
    """The costliest workloads in the window."""
    qs = narrow(LedgerEntry.objects.filter(hour__gte=start, hour__lt=end), visible_team_ids(user))
    return list(qs.values("workload_id", "workload_name", "team_name", "queue").annotate(
        a=Sum("amount")).order_by("-a")[:limit])


def budget_burndown(budget: Budget, now: datetime | None = None) -> dict[str, Any]:
    """Cumulative daily spend of the period, the budget line and the forecast point."""
    now = now or timezone.now()
    status = budget_status(budget, now)
    start, end = status["period_start"], status["period_end"]
    rows = LedgerEntry.objects.filter(
        cost_center=budget.cost_center_id, hour__gte=start, hour__lt=end
    ).annotate(day=TruncDay("hour")).values("day").annotate(a=Sum("amount")).order_by("day")
    days, cumulative, total = [], [], Decimal(0)
    for r in rows:
        total += r["a"]
        days.append(r["day"])
        cumulative.append(float(total))
    # What ran since the last rollup counts today (provisional): the line ends at the
    # budget's spent, the figure beside it.
    if status["provisional"]:
        today = localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
        if days and days[-1] >= today:
            cumulative[-1] = float(status["spent"])
        else:
            days.append(today)
            cumulative.append(float(status["spent"]))
    return {"days": days, "cumulative": cumulative, "amount": float(budget.amount),
            "start": start, "end": end, "forecast": float(status["forecast"]),
            "title": f"{budget.cost_center.code} {budget.period} budget"}
