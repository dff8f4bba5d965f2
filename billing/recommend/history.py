"""The hourly demand of each leaf queue and quota key (flavor, resource) over a window, from
the database, for every resource with history: `gpu` (whole cards and fractions), `cpu`
(cores), `memory` (GiB) and each extended resource (MIG slices and the like, in their count).

Used: what each usage record held (its admission's GPUs, cores and GiB, and its pod sets'
extended resources) for the part of the hour it covers, summed per queue and key. Pending: for
each workload waiting during the hour, what it asks times the part of the hour it waited (from
submission to its first admission (a workload's first wait only); still pending: to now; never
admitted and ended: to its last state change), on the first flavor it asked. Demand is the two
added: what the queue held plus what it asked for and did not get.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Min, Q

from billing.metering import hour_floor
from billing.models import UsageRecord
from core.quantity import base_to_amount
from scheduling.models import PodSet, Workload, WorkloadState

Key = tuple[str, str, str]  # (queue path, flavor, resource)
Series = dict[Key, list[float]]


def window_hours(now: datetime, days: float) -> list[datetime]:
    """The whole hours of the window, oldest first, ending with the last full hour."""
    end = hour_floor(now)
    n = int(round(days * 24))
    return [end - timedelta(hours=n - i) for i in range(n)]


def asks(pod_set: Mapping[str, Any]) -> dict[str, float]:
    """What one pod set asks in all, per resource, in the quota's units."""
    n = float(pod_set["count"])
    out = {"gpu": n * float(pod_set["gpus"]), "cpu": n * float(pod_set["cpu"]),
           "memory": n * float(pod_set["memory_gib"])}
    for name, base in (pod_set.get("resources") or {}).items():
        out[name] = out.get(name, 0.0) + n * float(base_to_amount(name, int(base)))
    return {k: v for k, v in out.items() if v > 0}


def _extended(workload_ids: set[int]) -> dict[int, dict[str, float]]:
    """Each workload's extended resources in all (its pod sets added)."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for ps in PodSet.objects.filter(workload_id__in=workload_ids).exclude(resources={}).values(
            "workload_id", "count", "gpus", "cpu", "memory_gib", "resources"):
        for name, v in asks(ps).items():
            if name not in ("gpu", "cpu", "memory"):
                out[ps["workload_id"]][name] = out[ps["workload_id"]].get(name, 0.0) + v
    return out


def used_series(hours: list[datetime]) -> Series:
    """(queue path, flavor, resource) -> the amount used each hour (mean over the hour)."""
    index = {h: i for i, h in enumerate(hours)}
    out: Series = defaultdict(lambda: [0.0] * len(hours))
    rows = list(UsageRecord.objects.filter(hour__gte=hours[0], hour__lte=hours[-1]).values(
        "hour", "queue", "flavor", "workload_id", "start", "end", "gpus", "cpu",
        "memory_gib"))
    extended = _extended({r["workload_id"] for r in rows})
    for r in rows:
        i = index.get(r["hour"])
        if i is None:
            continue
        share = max(0.0, (r["end"] - r["start"]).total_seconds() / 3600)
        held = {"gpu": float(r["gpus"] or Decimal(0)), "cpu": float(r["cpu"] or Decimal(0)),
                "memory": float(r["memory_gib"] or Decimal(0)),
                **extended.get(r["workload_id"], {})}
        for res, amount in held.items():
            if amount > 0:
                out[(r["queue"], r["flavor"], res)][i] += amount * share
    return out


def _asked(ids: list[int]) -> tuple[dict[int, dict[str, float]], dict[int, str]]:
    """Each workload's ask per resource (all its pod sets) and its first flavor."""
    amounts: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    flavor: dict[int, str] = {}
    for ps in PodSet.objects.filter(workload_id__in=ids).order_by("workload_id", "index").values(
            "workload_id", "count", "gpus", "cpu", "memory_gib", "resources", "flavors"):
        for res, v in asks(ps).items():
            amounts[ps["workload_id"]][res] += v
        if ps["flavors"] and ps["workload_id"] not in flavor:
            flavor[ps["workload_id"]] = ps["flavors"][0]
    return amounts, flavor


def pending_series(hours: list[datetime], now: datetime) -> Series:
    """(queue path, flavor, resource) -> the amount of work pending each hour (mean over the
    hour)."""
    start, end = hours[0], hours[-1] + timedelta(hours=1)
    out: Series = defaultdict(lambda: [0.0] * len(hours))
    rows = list(Workload.objects.filter(submitted_at__lt=end)
                .annotate(first=Min("admissions__reserved_at"))
                .filter(Q(first__gte=start) | Q(first__isnull=True, state=WorkloadState.PENDING)
                        | Q(first__isnull=True, state_changed_at__gte=start))
                .only("pk", "state", "submitted_at", "state_changed_at"))
    ids = [w.pk for w in rows]
    amounts, flavor = _asked(ids)
    paths = dict(Workload.objects.filter(pk__in=ids).values_list("pk", "queue__path"))
    for w in rows:
        if not amounts.get(w.pk) or w.pk not in flavor:
            continue
        first = getattr(w, "first", None)
        if first is not None:
            stop = first
        elif w.state == WorkloadState.PENDING:
            stop = now
        else:
            stop = w.state_changed_at
        a, b = max(w.submitted_at, start), min(stop, end)
        while a < b:
            h = hour_floor(a)
            edge = min(b, h + timedelta(hours=1))
            i = int((h - start).total_seconds() // 3600)
            part = (edge - a).total_seconds() / 3600
            for res, v in amounts[w.pk].items():
                out[(paths[w.pk], flavor[w.pk], res)][i] += v * part
            a = edge
    return out


def largest_jobs(hours: list[datetime], now: datetime) -> dict[Key, float]:
    """(queue path, flavor, resource) -> the most one workload submitted in the window
    asked."""
    start, end = hours[0], min(now, hours[-1] + timedelta(hours=1))
    ids = list(Workload.objects.filter(submitted_at__gte=start, submitted_at__lt=end)
               .values_list("pk", "queue__path"))
    amounts, flavor = _asked([pk for pk, _p in ids])
    out: dict[Key, float] = defaultdict(float)
    for pk, path in ids:
        if pk not in flavor:
            continue
        for res, v in amounts[pk].items():
            k = (path, flavor[pk], res)
            out[k] = max(out[k], v)
    return dict(out)
