"""The hourly demand of each leaf queue and GPU model over a window, from the database.

Used: the usage records' GPU-hours of the hour (what the metering wrote for each admission,
reserved or running), summed per queue and flavor. Pending: for each workload waiting during
the hour, its GPUs times the part of the hour it waited (from submission to its first
admission (a workload's first wait only); still pending: to
now; never admitted and ended: to its last state change), on the
first flavor it asked. Demand is the two added: what the queue held plus what it asked for and
did not get.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Min, Q, Sum

from billing.metering import hour_floor
from billing.models import UsageRecord
from scheduling.models import PodSet, Workload, WorkloadState

Series = dict[tuple[str, str], list[float]]


def window_hours(now: datetime, days: float) -> list[datetime]:
    """The whole hours of the window, oldest first, ending with the last full hour."""
    end = hour_floor(now)
    n = int(round(days * 24))
    return [end - timedelta(hours=n - i) for i in range(n)]


def used_series(hours: list[datetime]) -> Series:
    """(queue path, flavor) -> GPUs used each hour (GPU-hours of the hour)."""
    index = {h: i for i, h in enumerate(hours)}
    out: Series = defaultdict(lambda: [0.0] * len(hours))
    rows = (UsageRecord.objects.filter(hour__gte=hours[0], hour__lte=hours[-1])
            .values("hour", "queue", "flavor").annotate(g=Sum("gpu_hours")))
    for r in rows:
        i = index.get(r["hour"])
        if i is not None:
            out[(r["queue"], r["flavor"])][i] += float(r["g"] or Decimal(0))
    return out


def pending_series(hours: list[datetime], now: datetime) -> Series:
    """(queue path, flavor) -> GPUs of work pending each hour (mean over the hour)."""
    start, end = hours[0], hours[-1] + timedelta(hours=1)
    out: Series = defaultdict(lambda: [0.0] * len(hours))
    rows = list(Workload.objects.filter(submitted_at__lt=end)
                .annotate(first=Min("admissions__reserved_at"))
                .filter(Q(first__gte=start) | Q(first__isnull=True, state=WorkloadState.PENDING)
                        | Q(first__isnull=True, state_changed_at__gte=start))
                .only("pk", "state", "submitted_at", "state_changed_at"))
    ids = [w.pk for w in rows]
    gpus: dict[int, float] = defaultdict(float)
    flavor: dict[int, str] = {}
    for ps in PodSet.objects.filter(workload_id__in=ids).order_by("workload_id", "index").values(
            "workload_id", "count", "gpus", "flavors"):
        gpus[ps["workload_id"]] += ps["count"] * float(ps["gpus"])
        if ps["flavors"] and ps["workload_id"] not in flavor:
            flavor[ps["workload_id"]] = ps["flavors"][0]
    paths = dict(Workload.objects.filter(pk__in=ids).values_list("pk", "queue__path"))
    for w in rows:
        g = gpus.get(w.pk, 0.0)
        if g <= 0 or w.pk not in flavor:
            continue
        first = getattr(w, "first", None)
        if first is not None:
            stop = first
        elif w.state == WorkloadState.PENDING:
            stop = now
        else:
            stop = w.state_changed_at
        a, b = max(w.submitted_at, start), min(stop, end)
        series = out[(paths[w.pk], flavor[w.pk])]
        while a < b:
            h = hour_floor(a)
            edge = min(b, h + timedelta(hours=1))
            i = int((h - start).total_seconds() // 3600)
            series[i] += g * (edge - a).total_seconds() / 3600
            a = edge
    return out


def largest_jobs(hours: list[datetime], now: datetime) -> dict[tuple[str, str], float]:
    """(queue path, flavor) -> the most GPUs one workload submitted in the window asked."""
    start, end = hours[0], min(now, hours[-1] + timedelta(hours=1))
    gpus: dict[int, float] = defaultdict(float)
    key: dict[int, tuple[str, str]] = {}
    for ps in PodSet.objects.filter(workload__submitted_at__gte=start,
                                    workload__submitted_at__lt=end).order_by(
            "workload_id", "index").values("workload_id", "count", "gpus", "flavors",
                                           "workload__queue__path"):
        gpus[ps["workload_id"]] += ps["count"] * float(ps["gpus"])
        if ps["flavors"] and ps["workload_id"] not in key:
            key[ps["workload_id"]] = (ps["workload__queue__path"], ps["flavors"][0])
    out: dict[tuple[str, str], float] = defaultdict(float)
    for wid, k in key.items():
        out[k] = max(out[k], gpus[wid])
    return dict(out)
