"""The scheduling cycle on the database: lock, snapshot, engine, decisions written in bulk.

One cycle at a time across every worker and machine: `scheduling_lock` takes a PostgreSQL
transaction-level advisory lock (`pg_try_advisory_xact_lock` for the cycle, which skips when
another holds it; the blocking form for the other writers of workload states: sync, dispatch
results, cancel). On SQLite (`make run` without DATABASE_URL) a file lock under var/ plays the
same part. Everything a cycle writes happens in the lock's transaction, so a crash anywhere
leaves the database as it was.

Engine names are workload primary keys as strings; times are POSIX seconds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from core import changes, db
from scheduling import engine, extensions
from scheduling.engine.engine import Engine as EngineCore
from scheduling.engine.engine import schedule
from scheduling.models import (
    Admission,
    Cluster,
    EndReason,
    EventType,
    Node,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.services import event_new, workload_transition

logger = logging.getLogger(__name__)
S = WorkloadState
LOCK_KEY = 0x616C6C6F74  # "allot": one advisory lock id for every writer of workload states
STATE_FIELDS = ["state", "state_changed_at", "finished_at"]


# --- the lock ---------------------------------------------------------------------------------

@contextlib.contextmanager
def scheduling_lock(*, wait: bool) -> Iterator[bool]:
    """A transaction holding the scheduling lock; yields False (no transaction work should be
    done) when `wait` is False and another process holds it."""
    with db.xact_lock(LOCK_KEY, wait=wait, name="scheduling.lock") as got:
        yield got


bulk_set = db.bulk_set
insert_rows = db.insert_rows


def ts(value: datetime | None) -> float | None:
    """A datetime as POSIX seconds (the engine's clock)."""
    return value.timestamp() if value is not None else None


def dt(value: float) -> datetime:
    """POSIX seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(value, tz=UTC)


def engine_settings() -> engine.Settings:
    """The engine settings from settings.ALLOT_ENGINE (unknown keys ignored)."""
    known = set(engine.Settings.__dataclass_fields__)
    values = {k: v for k, v in getattr(settings, "ALLOT_ENGINE", {}).items() if k in known}
    return engine.Settings(**values)


# --- snapshot ---------------------------------------------------------------------------------

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


_static = _StaticCache()


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
    if connection.vendor != "postgresql":
        return list(
            Workload.objects.filter(state=S.PENDING, needs_approval=False)
            .annotate(rank=Window(RowNumber(), partition_by=[F("queue_id")],
                                  order_by=[F("priority_class__value").desc(),
                                            F("submitted_at").asc(), F("id").asc()]))
            .filter(rank__lte=limit).values_list("id", flat=True))
    from quotas.models import Queue

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
    return int(getattr(settings, "ALLOT_WORKERS", {}).get("max_pending_per_queue", 100))


def _f(value: Any) -> float:
    return float(value) if value is not None else 0.0


def build_snapshot(now: datetime) -> tuple[engine.Snapshot, SnapshotParts]:
    """Read the tree, the fleet, admitted and pending work; let adjusters narrow it."""
    from quotas.models import Flavor, Queue
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
        state__in=[S.RESERVED, S.RUNNING, S.PREEMPTING], needs_approval=False)
        .values_list("id", flat=True))
    live = _live_rows(pending_ids + active_ids, parts, queue_paths)
    pending_rows = [r for r in live if r["state"] == S.PENDING]
    active_rows = [r for r in live if r["state"] in (S.RESERVED, S.RUNNING, S.PREEMPTING)]
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


# --- the cycle --------------------------------------------------------------------------------

@dataclass
class CycleReport:
    """What a cycle did (for logs, tests and the benchmark)."""

    ran: bool
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)  # refused by a cluster joining the cycle
    pending: int = 0
    seconds: float = 0.0
    dispatch_clusters: set[int] = field(default_factory=set)
    suspend_admissions: list[int] = field(default_factory=list)
    delete_admissions: list[int] = field(default_factory=list)


def cycle_run(*, now: datetime | None = None, wait: bool = False,
              after_snapshot: Any = None, enqueue_dispatch: bool = True) -> CycleReport:
    """Run one scheduling cycle under the lock; skip (ran=False) if another cycle runs.

    `after_snapshot` is a test hook called between the engine and the writes (to inject a
    crash); the whole cycle is one transaction, so a crash leaves nothing half-written.
    """
    started = time.monotonic()
    with scheduling_lock(wait=wait) as got:
        if not got:
            return CycleReport(ran=False)
        now = now or timezone.now()
        report = CycleReport(ran=True)
        _requeue_expired_grace(now, report)
        snapshot, parts = build_snapshot(now)
        result = schedule(snapshot)
        if after_snapshot is not None:
            after_snapshot(snapshot, result)
        _apply(now, result, parts, report)
        report.pending = len(snapshot.pending) - len(report.admitted) - len(report.rejected)
        transaction.on_commit(lambda: _after_commit(report, enqueue_dispatch))
    report.seconds = time.monotonic() - started
    return report


def _after_commit(report: CycleReport, enqueue_dispatch: bool) -> None:
    from scheduling import tasks

    if report.refused:
        from scheduling.services import cycle_nudge

        cycle_nudge()  # placed elsewhere by the next cycle
    # Expiring: a dispatch that waited this long is done by the beat's sync pass anyway.
    for cluster_id in sorted(report.dispatch_clusters) if enqueue_dispatch else ():
        tasks.dispatch_cluster.apply_async((cluster_id,), expires=30)
    if report.suspend_admissions:
        tasks.backend_suspend_many.delay(report.suspend_admissions)
    if report.delete_admissions:
        tasks.backend_delete_many.delay(report.delete_admissions)


def _requeue_expired_grace(now: datetime, report: CycleReport) -> None:
    """Victims whose grace period ended go back to the queue, keeping their submit time."""
    victims = list(Workload.objects.filter(state=S.PREEMPTING, preempt_deadline__lte=now)
                   .select_for_update().order_by("pk"))
    if not victims:
        return
    admissions = {a.workload_id: a for a in Admission.objects.filter(
        workload__in=victims, ended_at__isnull=True)}
    events, closed = [], []
    for w in victims:
        adm = admissions.get(w.pk)
        ran = 0.0
        if adm is not None:
            adm.ended_at, adm.end_reason = now, EndReason.PREEMPTED
            closed.append(adm)
            report.delete_admissions.append(adm.pk)
            if adm.running_at is not None and w.checkpoint:
                # Progress counts up to the preemption decision; the grace is for saving.
                decided = (w.preempt_deadline or now) - timedelta(seconds=w.termination_grace_s)
                ran = max(0.0, (decided - adm.running_at).total_seconds())
        if w.checkpoint:
            w.progress_s += ran
        else:
            w.progress_s = 0.0
        events.append(workload_transition(
            w, S.PENDING, at=now, event_type=EventType.REQUEUED,
            message=f"requeued after preemption (grace {w.termination_grace_s}s over); "
            f"progress kept {w.progress_s:.0f}s" if w.checkpoint else
            "requeued after preemption; no checkpoint, restarts from the beginning",
            payload={"progress_s": w.progress_s}))
        w.preempt_deadline = None
        report.requeued.append(w.pk)
    bulk_set(Admission, closed, ["ended_at", "end_reason"])
    bulk_set(Workload, victims, [*STATE_FIELDS, "progress_s", "preempt_deadline"])
    insert_rows(WorkloadEvent, events)


# Per process: when a waiting workload's reason message (same code, numbers moved) was last
# written. Its numbers move with every admission around it; rewriting every head of every
# queue each cycle costs more than the cycle, so the message is refreshed at most every
# `reason_refresh_s` (a new code is always written, with its event).
_reason_written: dict[int, float] = {}


def _reason_refresh_due(workload_id: int) -> bool:
    now = time.monotonic()
    every = float(getattr(settings, "ALLOT_WORKERS", {}).get("reason_refresh_s", 5.0))
    if now - _reason_written.get(workload_id, -every) < every:
        return False
    if len(_reason_written) > 100_000:
        _reason_written.clear()
    _reason_written[workload_id] = now
    return True


def _apply(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
           report: CycleReport) -> None:
    """Write the engine's decisions: bulk inserts and updates, in the caller's transaction."""
    events: list[WorkloadEvent] = []
    changed: dict[int, Workload] = {}
    new_admissions: list[Admission] = []
    closed: list[Admission] = []

    for adm in result.admitted:
        w = parts.known(adm.workload)
        cluster = parts.clusters[adm.cluster]
        events.append(workload_transition(
            w, S.RESERVED, at=now, event_type=EventType.ADMITTED,
            message=f"admitted on {adm.cluster} ({adm.flavor}, {len(adm.nodes)} pods"
            f"{', borrowed' if adm.borrowed else ''}): reserving",
            payload={"cluster": adm.cluster, "flavor": adm.flavor, "borrowed": adm.borrowed,
                     "nodes": list(adm.nodes)}))
        w.reason_code, w.reason_message = "", ""
        changed[w.pk] = w
        new_admissions.append(Admission(
            workload=w, cluster=cluster, flavor_id=parts.flavors[adm.flavor],
            nodes=list(adm.nodes), borrowed=adm.borrowed, gpus=int(adm.gpus),
            cpu=Decimal(str(adm.cpu)), memory_gib=Decimal(str(adm.memory_gib)),
            reserved_at=now))
        report.admitted.append(w.pk)
        report.dispatch_clusters.add(cluster.pk)
    if new_admissions:
        # Clusters whose state lives in this database start their workloads in this
        # transaction (phase two without a trip; scheduling/dispatch.py, dispatch_in_cycle).
        from scheduling.dispatch import dispatch_in_cycle

        dispatch_in_cycle(now=now, admissions=new_admissions, parts=parts, events=events,
                          report=report)

    for pre in result.preempted:
        w = parts.known(pre.workload)
        by = parts.workload(pre.by)
        events.append(workload_transition(
            w, S.PREEMPTING, at=now, event_type=EventType.PREEMPTED, code=str(pre.reason.code),
            message=pre.reason.message,
            payload={"kind": str(pre.kind), "by": int(pre.by) if pre.by.isdigit() else pre.by,
                     "by_name": by.name if by else "", "grace_until": pre.grace_until}))
        w.preempt_deadline = dt(pre.grace_until)
        w.preempt_kind = str(pre.kind)
        w.preempted_by = by
        changed[w.pk] = w
        report.preempted.append(w.pk)
        adm_row = parts.admissions.get(pre.workload)
        if adm_row is not None:
            report.suspend_admissions.append(adm_row.pk)

    for rej in result.rejected:
        w = parts.known(rej.workload)
        events.append(workload_transition(
            w, S.REJECTED, at=now, event_type=EventType.REJECTED,
            code=str(rej.reasons[0].code) if rej.reasons else "",
            message=f"rejected: {len(rej.reasons)} reason(s)"))
        events += [event_new(w, EventType.REASON, at=now, code=str(r.code), message=r.message)
                   for r in rej.reasons]
        if rej.reasons:
            w.reason_code, w.reason_message = str(rej.reasons[0].code), rej.reasons[0].message
        changed[w.pk] = w
        report.rejected.append(w.pk)

    for rel in result.released:
        w = parts.known(rel.workload)
        adm_row = parts.admissions.get(rel.workload)
        if adm_row is not None:
            adm_row.ended_at, adm_row.end_reason = now, EndReason.PODS_READY_TIMEOUT
            closed.append(adm_row)
            report.delete_admissions.append(adm_row.pk)
        events.append(workload_transition(
            w, S.PENDING, at=now, event_type=EventType.TIMEOUT, code=str(rel.reason.code),
            message=rel.reason.message,
            payload={"backoff_count": rel.backoff_count, "not_before": rel.not_before}))
        w.not_before = dt(rel.not_before)
        w.backoff_count = rel.backoff_count
        w.reason_code, w.reason_message = str(rel.reason.code), rel.reason.message
        changed[w.pk] = w
        report.released.append(w.pk)

    moved = set(changed)  # rows whose state changed; the rest only get a new reason
    for name, reason in result.reasons.items():
        row = parts.rows.get(name)
        if row is None or row["state"] != S.PENDING or name in parts.workloads and \
                parts.workloads[name].state != S.PENDING:
            continue
        code = str(reason.code)
        if code == row["reason_code"] and (
                reason.message == row["reason_message"]
                or not _reason_refresh_due(row["id"])):
            continue
        w = parts.known(name)
        if code != w.reason_code:
            # The same code in consecutive cycles is recorded once (its numbers may move).
            events.append(event_new(w, EventType.REASON, at=now, code=code,
                                    message=reason.message))
        if code != w.reason_code or reason.message != w.reason_message:
            w.reason_code, w.reason_message = code, reason.message
            changed[w.pk] = w

    if closed:
        bulk_set(Admission, closed, ["ended_at", "end_reason"])
    insert_rows(Admission, new_admissions)
    reasons_only = [w for pk, w in changed.items() if pk not in moved]
    moved_rows = [w for pk, w in changed.items() if pk in moved]
    bulk_set(Workload, reasons_only, ["reason_code", "reason_message"])
    bulk_set(Workload, moved_rows,
             [*STATE_FIELDS, "reason_code", "reason_message", "preempt_deadline",
              "preempt_kind", "preempted_by", "not_before", "backoff_count"])
    insert_rows(WorkloadEvent, events)


# --- submission check -------------------------------------------------------------------------

class RequestChecker:
    """The engine's impossibility check for new requests (QUOTA-SEMANTICS.md §4.7).

    The tree and the fleet are read once per checker (a submission batch) and kept, so a stream
    of submissions does not rebuild them each time; any change to those tables shows at once.
    On PostgreSQL they are kept per thread until the change log says a `config` table changed
    (`core.changes`); elsewhere per process for a few seconds, keyed by a one-query
    stamp of the tables they come from.
    """

    _cache: tuple[Any, float, Any] | None = None
    TTL_S = 30.0

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._engine: Any = None

    @staticmethod
    def _stamp() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT COUNT(*) FROM quotas_quotaentry),"
                " (SELECT COALESCE(SUM(min), 0) + COALESCE(SUM(max), 0)"
                "  + COALESCE(SUM(lendable), 0) FROM quotas_quotaentry),"
                " (SELECT MAX(updated_at) FROM quotas_queue),"
                " (SELECT COUNT(*) FROM quotas_queue),"
                " (SELECT COUNT(*) FROM scheduling_node),"
                " (SELECT COALESCE(SUM(gpus), 0) + COALESCE(SUM(cpu), 0)"
                "  + COALESCE(SUM(memory_gib), 0) FROM scheduling_node),"
                " (SELECT COUNT(*) FROM scheduling_cluster WHERE enabled),"
                " (SELECT COUNT(*) FROM quotas_flavor),"
                " (SELECT COALESCE(SUM(gpu_memory_gib), 0) FROM quotas_flavor)")
            return cursor.fetchone()

    def _build(self) -> Any:
        snapshot, _ = _static_snapshot(self.now)
        return EngineCore(queues=snapshot.queues, clusters=snapshot.clusters,
                          flavors=snapshot.flavors, settings=snapshot.settings)

    def engine(self) -> Any:
        if self._engine is None:
            # PostgreSQL: cached per thread until a `config` table changes (the change log;
            # inside a submission, the view it already checked: no query at all).
            view = changes.validate()
            if view is not None:
                self._engine = view.derive("request checker", frozenset({"config"}),
                                           self._build)
                return self._engine
            stamp = self._stamp()
            cached = RequestChecker._cache
            if cached is not None and cached[0] == stamp and time.monotonic() < cached[1]:
                self._engine = cached[2]
            else:
                self._engine = self._build()
                RequestChecker._cache = (stamp, time.monotonic() + self.TTL_S, self._engine)
        return self._engine

    def check(self, workload: Workload, pod_sets: list[PodSet]) -> list[tuple[str, str]]:
        """Reasons the request can never fit (empty if it may wait)."""
        pc = workload.priority_class
        spec = engine.WorkloadSpec(
            name=str(workload.pk or workload.name), queue=workload.queue.path,
            display_name=workload.name,
            pod_sets=tuple(
                engine.PodSetSpec(count=p.count, flavors=tuple(p.flavors), gpus=p.gpus,
                                  cpu=_f(p.cpu), memory_gib=_f(p.memory_gib),
                                  gpu_memory_gib=p.gpu_memory_gib)
                for p in pod_sets),
            submitted_at=self.now.timestamp(), priority=pc.value, priority_class=pc.name,
            can_preempt=pc.can_preempt, preemptible=workload.preemptible,
            checkpoint=workload.checkpoint,
            termination_grace_s=float(workload.termination_grace_s),
            strategy=workload.strategy, dataset=workload.dataset,
            topology_same=str((workload.topology or {}).get("same", "")),
        )
        return [(str(r.code), r.message) for r in self.engine().check(spec)]


def request_check(workload: Workload, pod_sets: list[PodSet], *, now: datetime
                  ) -> list[tuple[str, str]]:
    """Reasons a new request can never fit (empty if it may); run at submission."""
    return RequestChecker(now).check(workload, pod_sets)


def _static_snapshot(now: datetime) -> tuple[engine.Snapshot, None]:
    """The tree and fleet only (no workloads): what `check_request` needs."""
    from quotas.models import Flavor
    from quotas.selectors import tree_specs
    from quotas.tree_rules import validate_tree

    specs = tree_specs()
    report = validate_tree(specs.values())
    queues = tuple(
        engine.QueueSpec(path=path, parent=spec.parent, quota={
            key: engine.KeyQuota(min=float(res.min),
                                 max=None if res.max is None else float(res.max),
                                 lendable=float(res.lendable))
            for key, res in report.resolved.get(path, {}).items()})
        for path, spec in specs.items()
    )
    by_cluster: dict[int, list[engine.NodeSpec]] = defaultdict(list)
    for n in Node.objects.select_related("flavor").order_by("cluster_id", "name"):
        by_cluster[n.cluster_id].append(engine.NodeSpec(
            name=n.name, flavor=n.flavor.name, gpus=n.gpus, cpu=_f(n.cpu),
            memory_gib=_f(n.memory_gib), rack=n.rack, ready=True))
    # Impossible means impossible on the whole fleet at full health: a node or a cluster that
    # is down now may come back, so health and readiness do not reject anything here.
    clusters = tuple(
        engine.ClusterSpec(name=c.name, nodes=tuple(by_cluster.get(c.pk, ())),
                           region=c.region, health=1.0, price=float(c.price),
                           datasets=frozenset(c.datasets or ()))
        for c in Cluster.objects.filter(enabled=True).order_by("name"))
    return engine.Snapshot(
        now=now.timestamp(), queues=queues, clusters=clusters,
        flavors=tuple(engine.FlavorSpec(name=f.name, gpu_memory_gib=f.gpu_memory_gib)
                      for f in Flavor.objects.all()),
        settings=engine_settings()), None
