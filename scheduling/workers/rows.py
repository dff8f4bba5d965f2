"""The workload rows a cycle reads: the heads of the queues and the admitted work, with what
never changes after submission kept per process, and the model instances built only for the
workloads a cycle changes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from core import db
from core.quantity import amounts
from quotas.models import Queue
from scheduling import engine, extensions
from scheduling.models import (
    Admission,
    Cluster,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadState,
)

S = WorkloadState


@dataclass
class SnapshotParts:
    """What a cycle knows besides the snapshot: DB rows by engine name, the adjusters' view."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)
    admissions: dict[str, Admission] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    flavors: dict[str, int] = field(default_factory=dict)
    node_selectors: dict[str, dict[str, str]] = field(default_factory=dict)  # by flavor name
    card_memory: dict[str, Any] = field(default_factory=dict)  # GiB per card, by flavor name
    priority_names: dict[int, str] = field(default_factory=dict)
    pod_sets: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pod_set_specs: dict[int, tuple[engine.PodSetSpec, ...]] = field(default_factory=dict)
    context: extensions.CycleContext | None = None

    def known(self, name: str) -> Workload:
        """`workload(name)` for a name the engine got from this snapshot (always there)."""
        w = self.workload(name)
        if w is None:
            raise KeyError(f"workload {name} is not in the cycle's snapshot")
        return w

    def workload(self, name: str) -> Workload | None:
        """A model instance for a workload the cycle changes (built only for those)."""
        w = self.workloads.get(name)
        if w is None:
            r = self.rows.get(name)
            if r is None:
                return None
            w = Workload(**{f: r[f] for f in MODEL_FIELDS})
            self.workloads[name] = w
        return w


# A workload's columns the cycle reads, split in two: what never changes after submission
# (read once per process and kept, with its pod sets: no JSON decoded again each cycle) and
# what the workers change (read every cycle).
STATIC_FIELDS = (
    "id", "name", "team__name", "owner__username", "priority_class_id", "preemptible",
    "checkpoint", "strategy", "dataset", "topology", "labels", "submitted_at",
    "termination_grace_s", "image", "command", "duration_hint_s", "kind", "manifest",
)


MOVING_FIELDS = (
    "id", "queue_id", "state", "not_before", "backoff_count",
    "preempt_deadline", "preempted_by_id", "preempt_kind", "reason_code", "reason_message",
    "progress_s", "state_changed_at", "finished_at", "nomination",
)


ROW_FIELDS = STATIC_FIELDS + MOVING_FIELDS[1:]


MODEL_FIELDS = tuple(f for f in ROW_FIELDS if "__" not in f)


POD_SET_FIELDS = ("id", "workload_id", "index", "count", "flavors", "gpus", "cpu", "memory_gib",
                  "gpu_memory_gib", "resources")


def pod_set_specs(rows: list[dict[str, Any]]) -> tuple[engine.PodSetSpec, ...]:
    """A workload's pod-set rows as the engine takes them."""
    return tuple(
        engine.PodSetSpec(count=p["count"], flavors=tuple(p["flavors"]), gpus=_f(p["gpus"]),
                          cpu=_f(p["cpu"]), memory_gib=_f(p["memory_gib"]),
                          gpu_memory_gib=p["gpu_memory_gib"],
                          resources=engine.resources_of(amounts(p["resources"])))
        for p in rows)


def _f(value: Any) -> float:
    return float(value) if value is not None else 0.0


Static = tuple[Any, dict[str, Any], list[dict[str, Any]], tuple[engine.PodSetSpec, ...]]


class _StaticCache:
    """Per process: workload id -> (version, static columns, pod sets, their engine specs:
    built once, not every cycle); forgotten every few minutes and when it grows large.

    A pending workload may be changed in place (scheduling/updates.py, workload_update), which
    replaces its pod sets: the version is the highest id of its pod sets, read with the moving
    columns each cycle, so a changed workload is read again at once.
    """

    TTL_S = 300.0
    MAX = 50_000

    def __init__(self) -> None:
        self.items: dict[int, Static] = {}
        self.until = 0.0

    def get_many(self, versions: dict[int, Any]) -> dict[int, Static]:
        now = time.monotonic()
        if now > self.until or len(self.items) > self.MAX:
            self.items, self.until = {}, now + self.TTL_S
        ids = list(versions)
        missing = [i for i in ids
                   if i not in self.items or self.items[i][0] != versions[i]]
        if missing:
            rows = {r["id"]: r for r in Workload.objects.filter(
                pk__in=db.in_array(missing, "bigint"))
                    .values(*STATIC_FIELDS)}
            sets: dict[int, list[dict[str, Any]]] = {}
            for ps in PodSet.objects.filter(
                    workload_id__in=db.in_array(missing, "bigint")).order_by(
                    "workload_id", "index").values(*POD_SET_FIELDS):
                sets.setdefault(ps["workload_id"], []).append(ps)
            for i, r in rows.items():
                ps = sets.get(i, [])
                self.items[i] = (max((p["id"] for p in ps), default=None), r, ps,
                                 pod_set_specs(ps))
        return {i: self.items[i] for i in ids if i in self.items}


def _live_rows(ids: list[int], parts: SnapshotParts,
               queues: dict[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """Full rows of these workloads (static part cached), oldest first; pod sets into parts.
    `queues`: queue id -> (path, namespace)."""
    if not ids:
        return []
    from django.db.models import Max

    moving = list(Workload.objects.filter(pk__in=db.in_array(ids, "bigint")).annotate(
        pod_sets_version=Max("pod_sets__id")).values(*MOVING_FIELDS, "pod_sets_version"))
    for m in moving:
        m["queue__path"], m["queue__namespace"] = queues[m["queue_id"]]
    static = _static.get_many({m["id"]: m.pop("pod_sets_version") for m in moving})
    rows = []
    for m in moving:
        cached = static.get(m["id"])
        if cached is None:
            continue
        rows.append({**cached[1], **m})
        parts.pod_sets[m["id"]] = cached[2]
        parts.pod_set_specs[m["id"]] = cached[3]
    rows.sort(key=lambda r: (r["submitted_at"], r["id"]))
    return rows


def _pending_heads(limit: int, now: datetime) -> list[int]:
    """Ids of the first `limit` pending workloads of each leaf, in the leaf's order (priority
    value, then submission), submitted by `now`: one committed while the cycle reads would
    otherwise be admitted at a time before its own submission (the next cycle takes it).

    On PostgreSQL: for each (queue, priority class) an index scan of the partial index
    `workload_pending_head` stops after `limit` rows, so the cost follows queues x classes x
    limit, not the length of the queues. Elsewhere one window query.
    """
    if not db.postgres():
        return list(
            Workload.objects.filter(state=S.PENDING, needs_approval=False, submitted_at__lte=now)
            .annotate(rank=Window(RowNumber(), partition_by=[F("queue_id")],
                                  order_by=[F("priority_class__value").desc(),
                                            F("submitted_at").asc(), F("id").asc()]))
            .filter(rank__lte=limit).values_list("id", flat=True))

    w, q, pc = Workload._meta.db_table, Queue._meta.db_table, PriorityClass._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT id FROM (SELECT h.id, row_number() OVER (PARTITION BY h.queue_id ORDER BY '
            f'pc.value DESC, h.submitted_at, h.id) AS rank FROM "{q}" q CROSS JOIN "{pc}" pc '
            f'CROSS JOIN LATERAL (SELECT "id", "queue_id", "submitted_at" FROM "{w}" '
            f'WHERE "queue_id" = q."id" AND "priority_class_id" = pc."id" AND "state" = %s '
            f'AND NOT "needs_approval" AND "submitted_at" <= %s ORDER BY "submitted_at", "id" '
            f'LIMIT %s) h) heads WHERE rank <= %s', [S.PENDING, now, limit, limit])
        return [row[0] for row in cursor.fetchall()]


def _nominated(now: datetime) -> list[int]:
    """Ids of the pending workloads with a nomination (partial index `workload_nominated`):
    read even when they are not among the heads, so what is held for them stays held."""
    return list(Workload.objects.filter(state=S.PENDING, nomination__isnull=False,
                                        needs_approval=False, submitted_at__lte=now)
                .values_list("id", flat=True))


def max_pending_per_queue() -> int:
    """How many pending workloads per leaf queue one cycle considers."""
    return int(settings.ALLOT_WORKERS["max_pending_per_queue"])


_static = _StaticCache()
