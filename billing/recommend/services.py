"""Compute the Min/Max recommendations of the queues a user decides for, replay them over the
history, and file one as a capacity request (an admin decides it in the usual flow)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Sum
from django.utils import timezone

from billing.recommend.history import largest_jobs, pending_series, used_series, window_hours
from billing.recommend.method import QueueHistory, Recommendation, recommend
from portal.pages.access import plan_scope
from quotas.capacity.models import CapacityRequest
from quotas.capacity.services import capacity_request_submit
from quotas.models import Flavor, Queue, QuotaEntry
from scheduling.models import Node, TraceReplay
from scheduling.planner.services import trace_replay_history

MIN_DAYS, MAX_DAYS, DEFAULT_DAYS = 1, 90, 30
RESOURCE = "gpu"


@dataclass(frozen=True)
class Options:
    """How much history, and which percentiles of the hourly demand become min and max."""

    days: float = DEFAULT_DAYS
    min_percentile: float = 50
    max_percentile: float = 95


def options_from(data: Any) -> Options:
    """Options from query or form data; ValidationError names each bad field."""
    errors: dict[str, list[str]] = {}
    values: dict[str, float] = {}
    for name, default, low, high in (("days", DEFAULT_DAYS, MIN_DAYS, MAX_DAYS),
                                     ("min_percentile", 50, 1, 100),
                                     ("max_percentile", 95, 1, 100)):
        raw = data.get(name)
        if raw in (None, ""):
            values[name] = default
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            errors[name] = [f"{raw!r} is not a number"]
            continue
        if not low <= value <= high:
            errors[name] = [f"{value:g} is not between {low} and {high}"]
        values[name] = value
    if not errors and values["min_percentile"] > values["max_percentile"]:
        errors["max_percentile"] = [f"{values['max_percentile']:g} < min_percentile "
                                    f"{values['min_percentile']:g}"]
    if errors:
        raise ValidationError(errors)
    return Options(**values)


def _check(user: Any) -> Any:
    scope = plan_scope(user)
    if not scope.allowed:
        raise PermissionDenied("recommendations are for admins and team leads")
    return scope


def recommendations(*, user: Any, options: Options, now: datetime | None = None
                    ) -> list[dict[str, Any]]:
    """Per leaf queue and GPU model the user decides for: the proposed min and max with the
    evidence (billing.recommend.method), computed over all the leaves of the key (a queue's
    lending depends on the others' borrowing)."""
    scope = _check(user)
    now = now or timezone.now()
    hours = window_hours(now, options.days)
    used = used_series(hours)
    pending = pending_series(hours, now)
    largest = largest_jobs(hours, now)
    queues = {q.pk: q for q in Queue.objects.all()}
    parents_of_children = {q.parent_id for q in queues.values() if q.parent_id}
    entries: dict[tuple[int, str], QuotaEntry] = {
        (e.queue_id, e.flavor.name): e for e in QuotaEntry.objects.select_related("flavor")
        .filter(resource=RESOURCE)}
    fleet = {r["flavor__name"]: float(r["g"] or 0) for r in Node.objects.filter(
        ready=True, cluster__enabled=True).values("flavor__name").annotate(g=Sum("gpus"))}
    flavors = {f for _q, f in entries} | {f for _p, f in used} | {f for _p, f in pending}
    zero = [0.0] * len(hours)
    rows: list[dict[str, Any]] = []
    for flavor in sorted(flavors):
        groups: dict[int | None, list[Queue]] = defaultdict(list)
        for q in queues.values():
            key = (q.path, flavor)
            if q.pk not in parents_of_children and (
                    (q.pk, flavor) in entries or key in used or key in pending):
                groups[q.parent_id].append(q)
        for parent_id, leaves in sorted(groups.items(), key=lambda kv: kv[0] or 0):
            parent = entries.get((parent_id, flavor)) if parent_id else None
            inner = sum(float(entries[(c.pk, flavor)].min) for c in queues.values()
                        if c.parent_id == parent_id and c.pk in parents_of_children
                        and (c.pk, flavor) in entries)
            capacity = (float(parent.min) if parent else fleet.get(flavor, 0.0)) - inner
            ceiling = float(parent.max) if parent and parent.max is not None else (
                float(parent.min) if parent else fleet.get(flavor, 0.0))
            history = []
            for q in sorted(leaves, key=lambda q: q.path):
                e = entries.get((q.pk, flavor))
                u = used.get((q.path, flavor), zero)
                p = pending.get((q.path, flavor), zero)
                history.append(QueueHistory(
                    q.path, [a + b for a, b in zip(u, p, strict=True)], list(u),
                    float(e.min) if e else 0.0,
                    float(e.max) if e and e.max is not None else None,
                    float(e.lendable) if e and e.lendable is not None else None,
                    largest.get((q.path, flavor), 0.0)))
            by_path = {q.path: q for q in leaves}
            for rec in recommend(history, hours, capacity=max(0.0, capacity), ceiling=ceiling,
                                 min_percentile=options.min_percentile,
                                 max_percentile=options.max_percentile):
                q = by_path[rec.path]
                if scope.can_plan(q.pk):
                    rows.append(_row(rec, q, flavor, capacity))
    return rows


def _row(rec: Recommendation, q: Queue, flavor: str, capacity: float) -> dict[str, Any]:
    return {"queue": rec.path, "queue_id": q.pk, "flavor": flavor, "resource": RESOURCE,
            "current_min": rec.current_min, "current_max": rec.current_max,
            "min": rec.min, "max": rec.max, "changes": rec.changes,
            "shared_capacity": capacity, "evidence": rec.evidence}


def as_changes(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows that change something, as a replay's proposal (`quotas` changes)."""
    return {"quotas": [{"queue": r["queue"], "flavor": r["flavor"], "resource": r["resource"],
                        "min": r["min"], "max": r["max"]} for r in rows if r["changes"]]}


def recommendations_replay(*, user: Any, options: Options) -> TraceReplay:
    """The history window replayed under static quotas, the current tree and the
    recommendations (the evidence of what they would have changed), in the background."""
    rows = recommendations(user=user, options=options)
    return trace_replay_history(user=user, days=options.days, changes=as_changes(rows))


def justification(row: dict[str, Any], options: Options) -> str:
    """The evidence in words, for the capacity request."""
    ev = row["evidence"]
    pct = ev["demand_percentiles"]
    return (f"Recommended from {options.days:g} days of usage history ({ev['hours']} hours, "
            f"{ev['active_hours']} with demand): hourly demand (used + pending GPUs) p50 "
            f"{pct['50']}, p90 {pct['90']}, p95 {pct['95']}; min = p{options.min_percentile:g} "
            f"of the demand over the hours with demand"
            f"{' scaled to fit the parent' if ev['scaled_to_fit'] else ''}, max = "
            f"p{options.max_percentile:g}. Demanded {ev['demand_gpu_hours']} GPU-hours, used "
            f"{ev['used_gpu_hours']}, pending {ev['pending_gpu_hours']}; borrowed "
            f"{ev['borrowed_gpu_hours']} GPU-hours above the current min, lent "
            f"{ev['lent_gpu_hours']}. Demand above the current min in "
            f"{ev['hours_above_current_min']} hours, above the proposed min in "
            f"{ev['hours_above_proposed_min']}.")


def recommendation_file(*, user: Any, queue: str, flavor: str, options: Options
                        ) -> CapacityRequest:
    """File the recommendation of one queue and GPU model as a capacity request (computed
    again here, so what is filed is what the method says); ValidationError when there is none
    or it changes nothing."""
    rows = [r for r in recommendations(user=user, options=options)
            if r["queue"] == queue and r["flavor"] == flavor]
    if not rows:
        raise ValidationError({"queue": [f"no recommendation for {queue!r} on {flavor!r} among "
                                         "the queues you decide for"]})
    row = rows[0]
    if not row["changes"]:
        raise ValidationError({"queue": [f"{queue} {flavor}/gpu: the recommendation (min "
                                         f"{row['min']}, max {row['max']}) is what it has"]})
    return capacity_request_submit(
        user=user, queue=Queue.objects.get(pk=row["queue_id"]),
        flavor=Flavor.objects.get(name=flavor), resource=RESOURCE,
        justification=justification(row, options), min=Decimal(row["min"]),
        max=None if row["max"] is None else Decimal(row["max"]))
