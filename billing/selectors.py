"""Billing reads: usage and cost per group, workload and team costs, budgets, chart series.

Researchers see their teams' costs only: every selector that returns money takes the viewer (or
a team) and narrows to `visible_team_ids`.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDay
from django.utils import timezone

from billing.metering import HOUR, exact_hours, hour_floor
from billing.models import (
    Budget,
    BudgetAction,
    BudgetFiring,
    CostCenter,
    Invoice,
    LedgerEntry,
    RateCard,
    ReconciliationRun,
    TeamCostCenter,
    UsageRecord,
    round_money,
    round_quantity,
)
from billing.services.budgets import active_firings, period_bounds, spent_in
from billing.services.usage import rate_versions
from quotas.models import TeamMembership, TeamRole

GROUPS = {"team": ("team__name", "team_name"), "queue": ("queue", "queue"),
          "flavor": ("flavor", "flavor")}
ZERO = Decimal("0.0000")


def is_admin(user) -> bool:
    """Platform admins (staff or superusers) see every cost."""
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def visible_team_ids(user) -> set[int] | None:
    """The teams whose costs the user may see; None means all (admins)."""
    if is_admin(user):
        return None
    return set(TeamMembership.objects.filter(user=user).values_list("team_id", flat=True))


def _narrow(qs: QuerySet, team_ids: set[int] | None) -> QuerySet:
    return qs if team_ids is None else qs.filter(team_id__in=team_ids)


def default_currency() -> str:
    cc = CostCenter.objects.order_by("-is_default", "code").first()
    return cc.currency if cc else "EUR"


def usage_summary(
    *, user, group_by: str, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Reserved, frozen and active GPU-hours, efficiency and cost per team, queue or flavor."""
    record_key, ledger_key = GROUPS[group_by]
    team_ids = visible_team_ids(user)
    records = _narrow(UsageRecord.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "reserved_gpu_hours": ZERO, "frozen_gpu_hours": ZERO, "active_gpu_hours": ZERO,
        "metered_gpu_hours": ZERO, "gap_gpu_hours": ZERO, "core_hours": ZERO,
        "cost": Decimal("0.00"), "currency": "",
    })
    agg = records.values(record_key, "phase").annotate(
        gpu=Sum("gpu_hours"), active=Sum("active_gpu_hours"), gap=Sum("gap_gpu_hours"),
        cores=Sum("core_hours"),
        metered=Sum("gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
        metered_gap=Sum("gap_gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
    )
    for a in agg:
        row = rows[a[record_key] or ""]
        row["core_hours"] += a["cores"] or ZERO
        if a["phase"] == "frozen":
            row["frozen_gpu_hours"] += a["gpu"] or ZERO
            continue
        row["reserved_gpu_hours"] += a["gpu"] or ZERO
        row["active_gpu_hours"] += a["active"] or ZERO
        row["gap_gpu_hours"] += a["gap"] or ZERO
        row["metered_gpu_hours"] += (a["metered"] or ZERO) - (a["metered_gap"] or ZERO)
    ledger = _narrow(LedgerEntry.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    for c in ledger.values(ledger_key, "currency").annotate(a=Sum("amount")):
        row = rows[c[ledger_key] or ""]
        row["cost"] += c["a"]
        row["currency"] = c["currency"]
    out = []
    for key in sorted(rows):
        row = rows[key]
        metered = row.pop("metered_gpu_hours")
        row["efficiency"] = (
            round_quantity(row["active_gpu_hours"] / metered) if metered > 0 else None
        )
        # Sums come back as floats on SQLite: keep the stated rounding on every backend.
        for name in ("reserved_gpu_hours", "frozen_gpu_hours", "active_gpu_hours",
                     "gap_gpu_hours", "core_hours"):
            row[name] = round_quantity(Decimal(row[name]))
        row["cost"] = round_money(Decimal(row["cost"]))
        if metered <= 0:
            row["active_gpu_hours"] = None  # nothing metered: unknown, not zero
        row["currency"] = row["currency"] or default_currency()
        out.append({group_by: key, **row})
    return out


def _rate_at(rates: dict, flavor: str, resource: str, now: datetime):
    """The rate version in force at `now` (None before the first)."""
    current = None
    for version in rates.get(flavor, {}).get(resource, ()):
        if version.effective_from <= now:
            current = version
    return current


def _admission_hourly_cost(adm, rates: dict, now: datetime) -> tuple[Decimal, str]:
    """What an open admission costs per hour at today's rates (frozen rate until it runs)."""
    per_hour = Decimal(0)
    currency = default_currency()
    for resource, amount in (("gpu", adm.gpus), ("cpu", adm.cpu), ("memory", adm.memory_gib)):
        version = _rate_at(rates, adm.flavor.name, resource, now)
        if version is not None and amount:
            rate = version.rate if adm.running_at else version.frozen_rate
            per_hour += Decimal(amount) * rate
            currency = version.currency
    return per_hour, currency


def workload_cost(workload, now: datetime | None = None) -> dict[str, Any]:
    """A workload's cost so far (billed hours + the current hour at today's rates) and why.

    The estimate of the total adds the remaining hours of its duration hint at the current
    hourly cost while it holds or waits for GPUs.
    """
    now = now or timezone.now()
    entries = LedgerEntry.objects.filter(workload_id=workload.pk)
    billed = round_money(Decimal(entries.aggregate(t=Sum("amount"))["t"] or 0))
    currency = entries.values_list("currency", flat=True).first() or default_currency()
    records = UsageRecord.objects.filter(workload_id=workload.pk)
    agg = records.values("phase").annotate(
        gpu=Sum("gpu_hours"), active=Sum("active_gpu_hours"), gap=Sum("gap_gpu_hours"),
        metered=Sum("gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
        metered_gap=Sum("gap_gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
    )
    reserved = frozen = active = metered = ZERO
    for a in agg:
        if a["phase"] == "frozen":
            frozen += a["gpu"] or ZERO
        else:
            reserved += a["gpu"] or ZERO
            active += a["active"] or ZERO
            metered += (a["metered"] or ZERO) - (a["metered_gap"] or ZERO)
    last_hour = records.order_by("-hour").values_list("hour", flat=True).first()
    unbilled_from = (last_hour + HOUR) if last_hour else None
    rates = rate_versions()
    open_adm = workload.admissions.filter(ended_at__isnull=True).select_related("flavor").first()
    per_hour, rate_currency = (
        _admission_hourly_cost(open_adm, rates, now) if open_adm else (Decimal(0), currency)
    )
    gpus = Decimal(open_adm.gpus) if open_adm else Decimal(0)
    unbilled = Decimal(0)
    unbilled_h = Decimal(0)  # held since the last billed hour: counts toward the hint too
    if per_hour and open_adm is not None:
        since = max(unbilled_from or open_adm.reserved_at, open_adm.reserved_at)
        if now > since:
            unbilled_h = exact_hours(now - since)
            unbilled = per_hour * unbilled_h
        currency = rate_currency
    so_far = round_money(billed + unbilled)
    remaining_h = Decimal(0)
    hint = getattr(workload, "duration_hint_s", None)
    if hint and workload.state in ("pending", "reserved", "running", "preempting"):
        ran_s = Decimal(str(getattr(workload, "progress_s", 0) or 0))
        held_h = (reserved + frozen) / gpus + unbilled_h if gpus else Decimal(0)
        ran_s = max(ran_s, held_h * 3600)
        remaining_h = max(Decimal(hint) - ran_s, Decimal(0)) / 3600
    if not per_hour and workload.state == "pending" and remaining_h:
        # Not admitted yet: its first-choice flavor's current GPU rate.
        for pod_set in workload.pod_sets.all():
            version = _rate_at(rates, (pod_set.flavors or [""])[0], "gpu", now)
            if version is not None:
                per_hour += pod_set.count * pod_set.gpus * version.rate
                currency = version.currency
    estimate = round_money(so_far + per_hour * remaining_h)
    return {
        "billed": billed, "unbilled": round_money(unbilled), "so_far": so_far,
        "estimate_total": estimate, "currency": currency,
        "reserved_gpu_hours": reserved, "frozen_gpu_hours": frozen,
        "active_gpu_hours": active if metered else None,
        "efficiency": round_quantity(active / metered) if metered > 0 else None,
        "per_hour": round_money(per_hour), "remaining_hours": round_quantity(remaining_h),
    }


def cost_center_of(team) -> CostCenter | None:
    link = TeamCostCenter.objects.select_related("cost_center").filter(team=team).first()
    if link is not None:
        return link.cost_center
    return CostCenter.objects.filter(is_default=True).first()


def team_month_to_date(team, now: datetime | None = None) -> dict[str, Any]:
    """A team's spend this month, its GPU-hours, and its cost center's budget standing."""
    now = now or timezone.now()
    start, end = period_bounds("monthly", now)
    entries = LedgerEntry.objects.filter(team=team, hour__gte=start, hour__lt=end)
    spent = round_money(Decimal(entries.aggregate(t=Sum("amount"))["t"] or 0))
    frozen = round_money(Decimal(entries.filter(
        kind__in=["gpu_frozen", "cpu_frozen", "memory_frozen"]).aggregate(
        t=Sum("amount"))["t"] or 0))
    records = UsageRecord.objects.filter(team=team, hour__gte=start, hour__lt=end)
    gpu = round_quantity(Decimal(
        records.filter(phase="running").aggregate(t=Sum("gpu_hours"))["t"] or 0))
    cc = cost_center_of(team)
    budget = Budget.objects.filter(cost_center=cc, active=True).first() if cc else None
    return {
        "team": team.name, "spent": spent, "frozen_cost": frozen, "gpu_hours": gpu,
        "currency": cc.currency if cc else default_currency(),
        "cost_center": cc.code if cc else None, "month": f"{start:%Y-%m}",
        "budget": budget_status(budget, now) if budget else None,
    }


def budget_forecast(budget: Budget, now: datetime | None = None) -> dict[str, Any]:
    """End-of-period forecast: spend so far + running workloads' remaining hours + run rate.

    Running workloads add their hourly cost for the hours their duration hint still needs
    (or to the period's end without a hint); the rest of the period adds the run rate of the
    other work seen in the last 24 h.
    """
    from scheduling.models import Admission

    now = now or timezone.now()
    start, end = period_bounds(budget.period, now)
    spent = spent_in(budget.cost_center_id, start, end)
    teams = list(TeamCostCenter.objects.filter(cost_center=budget.cost_center_id)
                 .values_list("team_id", flat=True))
    hours_left = max(exact_hours(end - now), Decimal(0))
    committed = Decimal(0)
    running_ids = set()
    admissions = Admission.objects.filter(
        ended_at__isnull=True, workload__team_id__in=teams
    ).select_related("workload", "flavor")
    rates = rate_versions()
    for adm in admissions:
        running_ids.add(adm.workload_id)
        per_hour, _ = _admission_hourly_cost(adm, rates, now)
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
    return {"spent": spent, "committed": round_money(committed),
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


def visible_budgets(user) -> QuerySet:
    """Budgets of the cost centers of the user's teams (admins: all)."""
    qs = Budget.objects.select_related("cost_center").prefetch_related("thresholds")
    team_ids = visible_team_ids(user)
    if team_ids is None:
        return qs
    ccs = TeamCostCenter.objects.filter(team_id__in=team_ids).values("cost_center_id")
    return qs.filter(cost_center_id__in=ccs)


def visible_invoices(user) -> QuerySet:
    """Invoices: admins all; leads those of their teams' cost centers; researchers none."""
    qs = Invoice.objects.select_related("cost_center")
    if is_admin(user):
        return qs
    lead_teams = TeamMembership.objects.filter(user=user, role=TeamRole.LEAD).values("team_id")
    ccs = TeamCostCenter.objects.filter(team_id__in=lead_teams).values("cost_center_id")
    return qs.filter(cost_center_id__in=ccs)


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
    return {"level": level, "message": top.message}


# Chart series: plain lists, turned into figures by billing/charts.py.

def spend_by_team_daily(*, user, start: datetime, end: datetime) -> dict[str, Any]:
    """Daily spend per team."""
    qs = _narrow(LedgerEntry.objects.filter(hour__gte=start, hour__lt=end), visible_team_ids(user))
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
    qs = _narrow(UsageRecord.objects.filter(hour__gte=start, hour__lt=end), team_ids)
    rows = qs.annotate(day=TruncDay("hour")).values("day", "phase").annotate(
        gpu=Sum("gpu_hours"), active=Sum("active_gpu_hours")).order_by("day")
    frozen_cost = _narrow(LedgerEntry.objects.filter(
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
    qs = _narrow(LedgerEntry.objects.filter(hour__gte=start, hour__lt=end), visible_team_ids(user))
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
    return {"days": days, "cumulative": cumulative, "amount": float(budget.amount),
            "start": start, "end": end, "forecast": float(status["forecast"]),
            "title": f"{budget.cost_center.code} {budget.period} budget"}


def latest_reconciliation() -> ReconciliationRun | None:
    """The most recent reconciliation run (with its findings)."""
    return ReconciliationRun.objects.prefetch_related("findings").first()


def rate_cards() -> QuerySet:
    """Every rate card version, newest first per flavor and resource."""
    return RateCard.objects.select_related("flavor").order_by(
        "flavor__name", "resource", "-version")


def visible_workload(user, workload_id: int):
    """The workload if the user may see its costs (admins, its owner, its team's members)."""
    from scheduling.models import Workload

    workload = Workload.objects.select_related("queue", "team", "owner").filter(
        pk=workload_id).first()
    if workload is None:
        return None
    team_ids = visible_team_ids(user)
    if team_ids is None or workload.owner_id == user.pk or workload.team_id in team_ids:
        return workload
    return None


def workload_charges(workload) -> dict[str, Any]:
    """Hour by hour: what the workload held (usage records) and what was charged (ledger)."""
    records = list(UsageRecord.objects.filter(workload_id=workload.pk).order_by(
        "hour", "phase", "admission_id"))
    entries = list(LedgerEntry.objects.filter(workload_id=workload.pk).order_by("seq"))
    return {"records": records, "entries": entries}
