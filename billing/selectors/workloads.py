"""One workload's costs: so far, estimated in all, and hour by hour."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q, Sum
from django.utils import timezone

from billing.metering import HOUR, exact_hours
from billing.models import LedgerEntry, UsageRecord, round_money, round_quantity
from billing.selectors.cost_centers import default_currency
from billing.selectors.provisional import workload_provisional
from billing.selectors.rates import admission_hourly_cost, rate_at
from billing.selectors.usage import ZERO
from billing.services.usage import admission_shapes, rate_versions


def workload_cost(workload, now: datetime | None = None) -> dict[str, Any]:
    """A workload's cost so far (billed hours + what its admissions have held since the last
    rollup covered them, `unbilled`: provisional, at today's rates) and why.

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
    # Fractions and MIG slices (as cards), as metering bills them.
    shapes = admission_shapes([open_adm]).get(open_adm.pk) if open_adm else None
    per_hour, rate_currency = (
        admission_hourly_cost(open_adm, rates, now, shapes) if open_adm
        else (Decimal(0), currency)
    )
    slices = shapes.slice_cards if shapes is not None else Decimal(0)
    gpus = Decimal(open_adm.gpus) + slices if open_adm else Decimal(0)
    unbilled_h = Decimal(0)  # held since the last billed hour: counts toward the hint too
    if per_hour and open_adm is not None:
        since = max(unbilled_from or open_adm.reserved_at, open_adm.reserved_at)
        if now > since:
            unbilled_h = exact_hours(now - since)
        currency = rate_currency
    # Every admission's time the rollup has not covered yet, ended ones included: a finished
    # workload keeps its cost until the rollup bills those hours.
    provisional = workload_provisional(workload, now=now)
    unbilled = provisional.cost
    if unbilled and not billed:
        currency = provisional.currency
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
            version = rate_at(rates, (pod_set.flavors or [""])[0], "gpu", now)
            if version is not None:
                per_hour += pod_set.count * pod_set.gpus * version.rate
                currency = version.currency
    estimate = round_money(so_far + per_hour * remaining_h)
    return {
        "billed": billed, "unbilled": round_money(unbilled), "so_far": so_far,
        "provisional": bool(unbilled), "as_of": now,
        "estimate_total": estimate, "currency": currency,
        "reserved_gpu_hours": reserved, "frozen_gpu_hours": frozen,
        "active_gpu_hours": active if metered else None,
        "efficiency": round_quantity(active / metered) if metered > 0 else None,
        "per_hour": round_money(per_hour), "remaining_hours": round_quantity(remaining_h),
    }


def workload_charges(workload) -> dict[str, Any]:
    """Hour by hour: what the workload held (usage records) and what was charged (ledger)."""
    records = list(UsageRecord.objects.filter(workload_id=workload.pk).order_by(
        "hour", "phase", "admission_id"))
    entries = list(LedgerEntry.objects.filter(workload_id=workload.pk).order_by("seq"))
    return {"records": records, "entries": entries}


def workload_utilisation(workload_id: int) -> dict[str, Any]:
    """A workload's GPU utilisation from its DCGM telemetry (the hourly usage records the
    rollup writes from Prometheus, or from the simulated clusters' exporter): per hour,
    active ÷ metered GPU-hours (the minutes with telemetry), and over the whole run the same
    ratio as the cost card's efficiency. `hours` lists every running hour, `utilisation`
    None where no telemetry covered it; `overall` None when none covered any (no telemetry)."""
    rows = (UsageRecord.objects.filter(workload_id=workload_id, phase="running")
            .values("hour").annotate(
                gpu=Sum("gpu_hours"), active=Sum("active_gpu_hours"), gap=Sum("gap_gpu_hours"),
                metered=Sum("gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
                metered_gap=Sum("gap_gpu_hours", filter=Q(active_gpu_hours__isnull=False)),
                minutes=Sum("telemetry_minutes"))
            .order_by("hour"))
    hours, active_all, metered_all = [], ZERO, ZERO
    for r in rows:
        metered = (r["metered"] or ZERO) - (r["metered_gap"] or ZERO)
        active = r["active"] or ZERO
        active_all += active
        metered_all += metered
        hours.append({"hour": r["hour"], "gpu_hours": r["gpu"] or ZERO,
                      "active_gpu_hours": active if metered > 0 else None,
                      "telemetry_minutes": r["minutes"] or 0,
                      "utilisation": round_quantity(active / metered) if metered > 0 else None})
    return {"hours": hours,
            "overall": round_quantity(active_all / metered_all) if metered_all > 0 else None,
            "active_gpu_hours": active_all if metered_all > 0 else None,
            "metered_gpu_hours": metered_all}
