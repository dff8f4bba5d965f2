"""Compute the Min/Max recommendations of the queues a user decides for, replay them over the
history, and file one as a capacity request (an admin decides it in the usual flow)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from billing.recommend.history import (
    Series,
    largest_jobs,
    pending_series,
    used_series,
    window_hours,
)
from billing.recommend.method import QueueHistory, Recommendation, recommend
from core.quantity import base_to_amount
from portal.pages.access import plan_scope
from quotas.capacity.models import CapacityRequest
from quotas.capacity.services import capacity_request_submit
from quotas.models import Flavor, Queue, QuotaEntry
from quotas.tree_rules import QueueSpec, QuotaSpec, validate_tree
from scheduling.models import Node, TraceReplay
from scheduling.planner.services import trace_replay_history

MIN_DAYS, MAX_DAYS, DEFAULT_DAYS = 1, 90, 30


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


UNITS = {"gpu": "GPU", "cpu": "core", "memory": "GiB"}


def unit_of(resource: str) -> str:
    """The unit a key's amounts are in, for the evidence's words ("GPU-hours", "core-hours")."""
    return UNITS.get(resource, "slice" if "mig-" in resource else "unit")


def _fleet() -> dict[tuple[str, str], float]:
    """(flavor, resource) -> what the ready nodes of enabled clusters have of it."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for n in Node.objects.filter(ready=True, cluster__enabled=True).values(
            "flavor__name", "gpus", "cpu", "memory_gib", "resources"):
        f = n["flavor__name"]
        out[(f, "gpu")] += float(n["gpus"])
        out[(f, "cpu")] += float(n["cpu"])
        out[(f, "memory")] += float(n["memory_gib"])
        for name, base in (n["resources"] or {}).items():
            out[(f, name)] += float(base_to_amount(name, int(base)))
    return dict(out)


@dataclass
class _Tree:
    """The queue tree and the window's series, for proposing one key top-down."""

    queues: dict[int, Queue]
    children: dict[int | None, list[Queue]]
    entries: dict[tuple[int, str, str], QuotaEntry]
    used: Series
    pending: Series
    largest: dict[tuple[str, str, str], float]
    zero: list[float]
    memo: dict[tuple[int, str, str, int], list[float]] = field(default_factory=dict)

    def subtree(self, q: Queue, key: tuple[str, str], series: Series) -> list[float]:
        """The queue's series, a parent's its subtree's added up (each computed once)."""
        m = (q.pk, *key, id(series))
        if m in self.memo:
            return self.memo[m]
        kids = self.children.get(q.pk, [])
        if not kids:
            out = list(series.get((q.path, *key), self.zero))
        else:
            out = list(self.zero)
            for c in kids:
                out = [a + b for a, b in zip(out, self.subtree(c, key, series), strict=True)]
        self.memo[m] = out
        return out

    def has_key(self, q: Queue, key: tuple[str, str]) -> bool:
        """Whether the queue sets the key or its subtree has history of it."""
        if (q.pk, *key) in self.entries:
            return True
        kids = self.children.get(q.pk, [])
        if not kids:
            k = (q.path, *key)
            return k in self.used or k in self.pending
        return any(self.has_key(c, key) for c in kids)

    def largest_job(self, q: Queue, key: tuple[str, str]) -> float:
        kids = self.children.get(q.pk, [])
        if not kids:
            return self.largest.get((q.path, *key), 0.0)
        return max((self.largest_job(c, key) for c in kids), default=0.0)

    def floor(self, q: Queue, key: tuple[str, str]) -> float:
        """The least min the queue can be given: its lendable, its children's floors added."""
        e = self.entries.get((q.pk, *key))
        own = float(e.lendable) if e and e.lendable is not None else 0.0
        kids = [c for c in self.children.get(q.pk, []) if self.has_key(c, key)]
        return max(own, sum(math.ceil(self.floor(c, key) - 1e-9) for c in kids))


def _history(tree: _Tree, q: Queue, key: tuple[str, str]) -> QueueHistory:
    e = tree.entries.get((q.pk, *key))
    u = tree.subtree(q, key, tree.used)
    p = tree.subtree(q, key, tree.pending)
    return QueueHistory(
        q.path, [a + b for a, b in zip(u, p, strict=True)], u,
        float(e.min) if e else 0.0, float(e.max) if e and e.max is not None else None,
        float(e.lendable) if e and e.lendable is not None else None,
        tree.largest_job(q, key), tree.floor(q, key))


def _propose_key(tree: _Tree, key: tuple[str, str], fleet: float, hours: list[datetime],
                 options: Options) -> list[tuple[Recommendation, Queue, float, str | None]]:
    """Every queue with the key, top-down: each group of siblings within its parent's
    proposal (min, max, exclusive part); (recommendation, queue, shared capacity, parent)."""
    out: list[tuple[Recommendation, Queue, float, str | None]] = []
    todo: list[tuple[int | None, float, float, float | None, str | None]] = [
        (None, fleet, fleet, None, None)]
    while todo:
        parent_id, capacity, ceiling, exclusive, parent_path = todo.pop(0)
        group = sorted((c for c in tree.children.get(parent_id, []) if tree.has_key(c, key)),
                       key=lambda c: c.path)
        if not group:
            continue
        by_path = {c.path: c for c in group}
        for rec in recommend([_history(tree, c, key) for c in group], hours,
                             capacity=max(0.0, capacity), ceiling=ceiling,
                             min_percentile=options.min_percentile,
                             max_percentile=options.max_percentile,
                             exclusive_capacity=exclusive):
            q = by_path[rec.path]
            out.append((rec, q, capacity, parent_path))
            if tree.children.get(q.pk):
                e = tree.entries.get((q.pk, *key))
                lend = float(e.lendable) if e and e.lendable is not None else None
                top = float(rec.max) if rec.max is not None else ceiling
                todo.append((q.pk, float(rec.min), top,
                             rec.min - lend if lend is not None else 0.0, q.path))
    return out


def recommendations(*, user: Any, options: Options, now: datetime | None = None
                    ) -> list[dict[str, Any]]:
    """Per queue (every level of the tree) and key (flavor, resource) with history or a quota,
    the proposed min and max with the evidence (billing.recommend.method); each key proposed
    top-down over the whole tree, so that every group of children fits its parent's proposal
    (a queue's lending depends on the others' borrowing); only the rows of the queues the user
    may plan for are returned."""
    scope = _check(user)
    return [r for r in all_recommendations(options=options, now=now)
            if scope.can_plan(r["queue_id"])]


def all_recommendations(*, options: Options, now: datetime | None = None
                        ) -> list[dict[str, Any]]:
    """The whole tree's recommendations (`recommendations`, before the user's filter)."""
    now = now or timezone.now()
    hours = window_hours(now, options.days)
    used = used_series(hours)
    pending = pending_series(hours, now)
    queues = {q.pk: q for q in Queue.objects.all()}
    children: dict[int | None, list[Queue]] = defaultdict(list)
    for q in queues.values():
        children[q.parent_id].append(q)
    entries = {(e.queue_id, e.flavor.name, e.resource): e
               for e in QuotaEntry.objects.select_related("flavor")}
    tree = _Tree(queues, children, entries, used, pending, largest_jobs(hours, now),
                 [0.0] * len(hours))
    keys = ({(f, r) for _q, f, r in entries} | {(f, r) for _p, f, r in used}
            | {(f, r) for _p, f, r in pending})
    accounted = {(f, r) for _q, f, r in entries}
    fleet = _fleet()
    rows: list[dict[str, Any]] = []
    for key in sorted(keys):
        props = _propose_key(tree, key, fleet.get(key, 0.0), hours, options)
        proposed = {q.path: rec for rec, q, _c, _p in props}
        for rec, q, capacity, parent in props:
            rows.append(_row(rec, q, key, capacity, parent=parent,
                             parent_rec=proposed.get(parent) if parent else None,
                             accounted=key in accounted))
    rows.sort(key=lambda r: (r["flavor"], r["resource"] != "gpu", r["resource"], r["queue"]))
    return rows


def _row(rec: Recommendation, q: Queue, key: tuple[str, str], capacity: float, *,
         parent: str | None, parent_rec: Recommendation | None, accounted: bool
         ) -> dict[str, Any]:
    flavor, resource = key
    return {"queue": rec.path, "queue_id": q.pk, "flavor": flavor, "resource": resource,
            "unit": unit_of(resource), "parent": parent,
            "current_min": rec.current_min, "current_max": rec.current_max,
            "min": rec.min, "max": rec.max, "changes": rec.changes,
            "shared_capacity": capacity, "accounted": accounted,
            "parent_proposal": {"min": parent_rec.min, "max": parent_rec.max,
                                "changes": parent_rec.changes} if parent_rec else None,
            "evidence": rec.evidence}


def tree_problems(rows: list[dict[str, Any]]) -> list[str]:
    """The tree rules (V1-V4) the whole proposal would break, applied to the tree as it is
    (empty: consistent); for the API and the tests."""
    quotas: dict[str, dict[tuple[str, str], QuotaSpec]] = defaultdict(dict)
    for e in QuotaEntry.objects.select_related("flavor", "queue"):
        quotas[e.queue.path][(e.flavor.name, e.resource)] = QuotaSpec(e.min, e.max, e.lendable)
    for r in rows:
        old = quotas[r["queue"]].get((r["flavor"], r["resource"]), QuotaSpec())
        quotas[r["queue"]][(r["flavor"], r["resource"])] = QuotaSpec(
            Decimal(r["min"]), None if r["max"] is None else Decimal(r["max"]), old.lendable)
    specs = [QueueSpec(q.path, q.parent.path if q.parent else None, quotas.get(q.path, {}))
             for q in Queue.objects.select_related("parent")]
    report = validate_tree(specs, max_depth=settings.ALLOT_MAX_TREE_DEPTH)
    return [str(p) for p in report.errors]


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
    u = row.get("unit", "GPU")
    parent = row.get("parent_proposal")
    depends = (f" Consistent with the proposal for {row['parent']} (min {parent['min']}, max "
               f"{parent['max']}), which this needs first where it raises the children's mins "
               "above the parent's." if parent and parent["changes"] else "")
    return (f"Recommended from {options.days:g} days of usage history ({ev['hours']} hours, "
            f"{ev['active_hours']} with demand): hourly demand of {row['flavor']}/"
            f"{row['resource']} (used + pending, in {u}s) p50 "
            f"{pct['50']}, p90 {pct['90']}, p95 {pct['95']}; min = p{options.min_percentile:g} "
            f"of the demand over the hours with demand"
            f"{' scaled to fit the parent' if ev['scaled_to_fit'] else ''}, max = "
            f"p{options.max_percentile:g}. Demanded {ev['demand_gpu_hours']} {u}-hours, used "
            f"{ev['used_gpu_hours']}, pending {ev['pending_gpu_hours']}; borrowed "
            f"{ev['borrowed_gpu_hours']} {u}-hours above the current min, lent "
            f"{ev['lent_gpu_hours']}. Demand above the current min in "
            f"{ev['hours_above_current_min']} hours, above the proposed min in "
            f"{ev['hours_above_proposed_min']}.{depends}")


def recommendation_file(*, user: Any, queue: str, flavor: str, options: Options,
                        resource: str = "gpu") -> CapacityRequest:
    """File the recommendation of one queue and key as a capacity request (computed again
    here, so what is filed is what the method says); ValidationError when there is none or it
    changes nothing."""
    rows = [r for r in recommendations(user=user, options=options)
            if r["queue"] == queue and r["flavor"] == flavor and r["resource"] == resource]
    if not rows:
        raise ValidationError({"queue": [f"no recommendation for {queue!r} on "
                                         f"{flavor}/{resource} among the queues you plan for"]})
    row = rows[0]
    if not row["changes"]:
        raise ValidationError({"queue": [f"{queue} {flavor}/{resource}: the recommendation "
                                         f"(min {row['min']}, max {row['max']}) is what it has"]})
    return capacity_request_submit(
        user=user, queue=Queue.objects.get(pk=row["queue_id"]),
        flavor=Flavor.objects.get(name=flavor), resource=resource,
        justification=justification(row, options), min=Decimal(row["min"]),
        max=None if row["max"] is None else Decimal(row["max"]))
