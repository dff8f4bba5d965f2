"""The engine's snapshot of the database: what one cycle reads, and what it keeps between
cycles.

Engine names are workload primary keys as strings; times are POSIX seconds. What never changes
after submission is read once per process and kept; what the workers change is read every
cycle.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from core import db
from quotas.models import Flavor, Queue
from scheduling import engine, extensions
from scheduling.models import (
    ACTIVE_STATES,
    Admission,
    Cluster,
    EventType,
    Node,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadEvent,
    WorkloadState,
)

logger = logging.getLogger(__name__)
S = WorkloadState


def ts(value: datetime | None) -> float | None:
    """A datetime as POSIX seconds (the engine's clock)."""
    return value.timestamp() if value is not None else None


def dt(value: float) -> datetime:
    """POSIX seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(value, tz=UTC)


def engine_settings() -> engine.Settings:
    """The engine settings from settings.ALLOT_ENGINE (unknown keys ignored)."""
    known = set(engine.Settings.__dataclass_fields__)
    values = {k: v for k, v in settings.ALLOT_ENGINE.items() if k in known}
    return engine.Settings(**values)


@dataclass
class SnapshotParts:
    """What a cycle knows besides the snapshot: DB rows by engine name, the adjusters' view."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)
    admissions: dict[str, Admission] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    flavors: dict[str, int] = field(default_factory=dict)
    node_selectors: dict[str, dict[str, str]] = field(default_factory=dict)  # by flavor name
    priority_names: dict[int, str] = field(default_factory=dict)
    pod_sets: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
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
    "termination_grace_s", "image", "command", "duration_hint_s",
)


MOVING_FIELDS = (
    "id", "queue_id", "state", "not_before", "backoff_count",
    "preempt_deadline", "preempted_by_id", "preempt_kind", "reason_code", "reason_message",
    "progress_s", "state_changed_at", "finished_at",
)


ROW_FIELDS = STATIC_FIELDS + MOVING_FIELDS[1:]


MODEL_FIELDS = tuple(f for f in ROW_FIELDS if "__" not in f)


POD_SET_FIELDS = ("id", "workload_id", "index", "count", "flavors", "gpus", "cpu", "memory_gib",
                  "gpu_memory_gib")


class _StaticCache:
    """Per process: workload id -> (version, static columns, pod sets); forgotten every few
    minutes and when it grows large.

    A pending workload may be changed in place (scheduling/updates.py, workload_update), which
    replaces its pod sets: the version is the highest id of its pod sets, read with the moving
    columns each cycle, so a changed workload is read again at once.
    """

    TTL_S = 300.0
    MAX = 50_000

    def __init__(self) -> None:
        self.items: dict[int, tuple[Any, dict[str, Any], list[dict[str, Any]]]] = {}
        self.until = 0.0

    def get_many(self, versions: dict[int, Any]
                 ) -> dict[int, tuple[Any, dict[str, Any], list[dict[str, Any]]]]:
        now = time.monotonic()
        if now > self.until or len(self.items) > self.MAX:
            self.items, self.until = {}, now + self.TTL_S
        ids = list(versions)
        missing = [i for i in ids
                   if i not in self.items or self.items[i][0] != versions[i]]
        if missing:
            rows = {r["id"]: r for r in Workload.objects.filter(pk__in=missing)
                    .values(*STATIC_FIELDS)}
            sets: dict[int, list[dict[str, Any]]] = {}
            for ps in PodSet.objects.filter(workload_id__in=missing).order_by(
                    "workload_id", "index").values(*POD_SET_FIELDS):
                sets.setdefault(ps["workload_id"], []).append(ps)
            for i, r in rows.items():
                ps = sets.get(i, [])
                self.items[i] = (max((p["id"] for p in ps), default=None), r, ps)
        return {i: self.items[i] for i in ids if i in self.items}


def _live_rows(ids: list[int], parts: SnapshotParts,
               queues: dict[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """Full rows of these workloads (static part cached), oldest first; pod sets into parts.
    `queues`: queue id -> (path, namespace)."""
    if not ids:
        return []
    from django.db.models import Max

    moving = list(Workload.objects.filter(pk__in=ids).annotate(
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
    rows.sort(key=lambda r: (r["submitted_at"], r["id"]))
    return rows


def _pending_heads(limit: int) -> list[int]:
    """Ids of the first `limit` pending workloads of each leaf, in the leaf's order (priority
    value, then submission).

    On PostgreSQL: for each (queue, priority class) an index scan of the partial index
    `workload_pending_head` stops after `limit` rows, so the cost follows queues x classes x
    limit, not the length of the queues. Elsewhere one window query.
    """
    if not db.postgres():
        return list(
            Workload.objects.filter(state=S.PENDING, needs_approval=False)
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
            f'AND NOT "needs_approval" ORDER BY "submitted_at", "id" LIMIT %s) h) heads '
            f'WHERE rank <= %s', [S.PENDING, limit, limit])
        return [row[0] for row in cursor.fetchall()]


def max_pending_per_queue() -> int:
    """How many pending workloads per leaf queue one cycle considers."""
    return int(settings.ALLOT_WORKERS["max_pending_per_queue"])


def _f(value: Any) -> float:
    return float(value) if value is not None else 0.0


def build_snapshot(now: datetime) -> tuple[engine.Snapshot, SnapshotParts]:
    """Read the tree, the fleet, admitted and pending work; let adjusters narrow it."""
    from quotas.selectors import tree_specs
    from quotas.tree_rules import validate_tree

    parts = SnapshotParts()
    eng_settings = engine_settings()

    specs = tree_specs()
    report = validate_tree(specs.values())
    if report.errors:
        # A stored tree is validated on every change; if it is broken anyway, refuse to
        # schedule on it rather than guess.
        raise RuntimeError("the stored queue tree breaks its rules: "
                           + "; ".join(p.message for p in report.errors))
    queue_rows = list(Queue.objects.values_list("id", "path", "namespace", "strategy"))
    strategies = {path: strategy for _, path, _, strategy in queue_rows}
    queue_paths = {pk: (path, namespace) for pk, path, namespace, _ in queue_rows}

    clusters = list(Cluster.objects.filter(enabled=True).order_by("name"))
    parts.clusters = {c.name: c for c in clusters}
    flavor_rows = list(Flavor.objects.values("id", "name", "gpu_memory_gib", "node_selector"))
    parts.flavors = {f["name"]: f["id"] for f in flavor_rows}
    parts.node_selectors = {f["name"]: dict(f["node_selector"] or {}) for f in flavor_rows}
    flavor_name = {f["id"]: f["name"] for f in flavor_rows}

    nodes_by_cluster: dict[int, list[engine.NodeSpec]] = defaultdict(list)
    for n in Node.objects.filter(cluster__in=clusters).order_by("cluster_id", "name").values(
        "cluster_id", "name", "flavor_id", "gpus", "cpu", "memory_gib", "rack", "ready"
    ):
        nodes_by_cluster[n["cluster_id"]].append(engine.NodeSpec(
            name=n["name"], flavor=flavor_name[n["flavor_id"]], gpus=n["gpus"],
            cpu=_f(n["cpu"]), memory_gib=_f(n["memory_gib"]), rack=n["rack"],
            ready=n["ready"]))

    priorities = {p.pk: p for p in PriorityClass.objects.all()}
    parts.priority_names = {pk: p.name for pk, p in priorities.items()}
    # Pending work enters the cycle up to `max_pending_per_queue` per leaf, in the leaf's own
    # order (priority, then submission): the cycle's cost stays bounded by queues x that
    # number however long the queues grow (Kueue looks at one head per queue per cycle).
    limit = max_pending_per_queue()
    pending_ids = _pending_heads(limit)
    active_ids = list(Workload.objects.filter(
        state__in=ACTIVE_STATES, needs_approval=False)
        .values_list("id", flat=True))
    live = _live_rows(pending_ids + active_ids, parts, queue_paths)
    pending_rows = [r for r in live if r["state"] == S.PENDING]
    active_rows = [r for r in live if r["state"] in ACTIVE_STATES]
    live = pending_rows + active_rows
    live.sort(key=lambda r: (r["submitted_at"], r["id"]))
    open_adm = {
        a.workload_id: a
        for a in Admission.objects.filter(ended_at__isnull=True, workload_id__in=[
            r["id"] for r in active_rows])
    }

    ctx = extensions.CycleContext(
        now=now, queue_paths=list(specs), clusters=[c.name for c in clusters],
        pending=[
            extensions.PendingInfo(
                id=r["id"], name=r["name"], queue_path=r["queue__path"], team=r["team__name"],
                owner=r["owner__username"],
                priority_class=priorities[r["priority_class_id"]].name, labels=r["labels"],
                dataset=r["dataset"],
                gpus=sum(p["count"] * p["gpus"] for p in parts.pod_sets.get(r["id"], [])),
                flavors=tuple((parts.pod_sets.get(r["id"]) or [{"flavors": []}])[0]["flavors"]),
            )
            for r in pending_rows
        ],
    )
    for path, keys in report.resolved.items():
        for key, res in keys.items():
            ctx.quota_max[(path, f"{key[0]}/{key[1]}")] = (
                None if res.max is None else float(res.max))
    extensions.run_cycle_adjusters(ctx)
    parts.context = ctx

    queues = []
    for path, spec in specs.items():
        quota = {}
        for key, res in report.resolved.get(path, {}).items():
            kn = f"{key[0]}/{key[1]}"
            quota[key] = engine.KeyQuota(
                min=float(res.min), max=ctx.quota_max.get((path, kn)),
                lendable=float(res.lendable), max_policy=ctx.max_policy.get((path, kn)))
        queues.append(engine.QueueSpec(path=path, parent=spec.parent, quota=quota,
                                       strategy=strategies.get(path, "") or ""))

    def spec_of(r: dict[str, Any]) -> engine.WorkloadSpec:
        pc = priorities[r["priority_class_id"]]
        allowed = ctx.allowed_clusters.get(r["id"])
        return engine.WorkloadSpec(
            name=str(r["id"]), queue=r["queue__path"], display_name=r["name"],
            pod_sets=tuple(
                engine.PodSetSpec(count=p["count"], flavors=tuple(p["flavors"]), gpus=p["gpus"],
                                  cpu=_f(p["cpu"]), memory_gib=_f(p["memory_gib"]),
                                  gpu_memory_gib=p["gpu_memory_gib"])
                for p in parts.pod_sets.get(r["id"], [])
            ),
            submitted_at=r["submitted_at"].timestamp(), priority=pc.value,
            priority_class=pc.name, can_preempt=pc.can_preempt, preemptible=r["preemptible"],
            checkpoint=r["checkpoint"], termination_grace_s=float(r["termination_grace_s"]),
            strategy=r["strategy"], dataset=r["dataset"],
            topology_same=str((r["topology"] or {}).get("same", "")),
            labels={str(k): str(v) for k, v in (r["labels"] or {}).items()},
            allowed_clusters=frozenset(allowed) if allowed is not None else None,
            allowed_policy=ctx.cluster_reasons.get(r["id"], ""),
            not_before=ts(r["not_before"]), backoff_count=r["backoff_count"],
        )

    pending: list[engine.WorkloadSpec] = []
    admitted: list[engine.AdmittedWorkload] = []
    waiting: dict[str, list[str]] = defaultdict(list)
    cluster_by_id = {c.pk: c for c in clusters}
    for r in live:
        parts.rows[str(r["id"])] = r
        if r["state"] == S.PENDING:
            pending.append(spec_of(r))
            continue
        adm = open_adm.get(r["id"])
        if adm is None:
            logger.error("workload %s is %s without an open admission; left out of the cycle",
                         r["id"], r["state"])
            continue
        parts.admissions[str(r["id"])] = adm
        cluster = cluster_by_id.get(adm.cluster_id)
        preempting = r["state"] == S.PREEMPTING
        if preempting and r["preempted_by_id"]:
            waiting[str(r["preempted_by_id"])].append(str(r["id"]))
        admitted.append(engine.AdmittedWorkload(
            workload=spec_of(r), cluster=cluster.name if cluster else str(adm.cluster_id),
            flavor=flavor_name[adm.flavor_id], nodes=tuple(adm.nodes), borrowed=adm.borrowed,
            admitted_at=adm.reserved_at.timestamp(),
            running=adm.running_at is not None, admission_seq=adm.pk,
            grace_until=ts(r["preempt_deadline"]) if preempting else None,
            preempted_by=str(r["preempted_by_id"] or ""),
        ))

    cluster_specs = tuple(
        engine.ClusterSpec(
            name=c.name, nodes=tuple(nodes_by_cluster.get(c.pk, ())), region=c.region,
            health=c.effective_health(now), price=float(c.price),
            datasets=frozenset(c.datasets or ()))
        for c in clusters
    )
    snapshot = engine.Snapshot(
        now=now.timestamp(), queues=tuple(queues), clusters=cluster_specs,
        flavors=tuple(engine.FlavorSpec(name=f["name"], gpu_memory_gib=f["gpu_memory_gib"])
                      for f in flavor_rows),
        pending=tuple(pending), admitted=tuple(admitted), settings=eng_settings,
        repayment=_repayment(now, eng_settings), cooldowns=_cooldowns(now, eng_settings),
        waiting={k: tuple(v) for k, v in waiting.items()},
    )
    return snapshot, parts


def _repayment(now: datetime, s: engine.Settings) -> tuple[engine.RepaymentRecord, ...]:
    since = now - timedelta(seconds=s.repayment_window_s)
    rows = Admission.objects.filter(borrowed=True, ended_at__gte=since).values_list(
        "workload__queue__path", "ended_at", "forced")
    return tuple(engine.RepaymentRecord(queue=q, ended_at=e.timestamp(), forced=f)
                 for q, e, f in rows if e is not None)


def _cooldowns(now: datetime, s: engine.Settings) -> dict[str, float]:
    """Leaf -> end of its reclaim cooldown, from the reclaim decisions' events."""
    since = now - timedelta(seconds=s.reclaim_cooldown_s)
    out: dict[str, float] = {}
    for path, at in WorkloadEvent.objects.filter(
        type=EventType.PREEMPTED, at__gte=since, payload__kind="reclaim"
    ).values_list("workload__queue__path", "at"):
        out[path] = max(out.get(path, 0.0), at.timestamp() + s.reclaim_cooldown_s)
    return out


_static = _StaticCache()
