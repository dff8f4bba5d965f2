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
import fcntl
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
from django.utils import timezone

from scheduling import engine, extensions
from scheduling.engine.engine import check_request, schedule
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
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                fn = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
                cursor.execute(f"SELECT {fn}(%s)", [LOCK_KEY])
                got = cursor.fetchone()[0] if not wait else True
            yield bool(got)
        return
    # SQLite: one machine, several processes (web, worker, beat): a file lock serialises them.
    path = settings.VAR_DIR / "scheduling.lock"
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            with transaction.atomic():
                yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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

    workloads: dict[str, Workload] = field(default_factory=dict)
    admissions: dict[str, Admission] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    flavors: dict[str, int] = field(default_factory=dict)
    pod_sets: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    context: extensions.CycleContext | None = None


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
    strategies = dict(Queue.objects.values_list("path", "strategy"))

    clusters = list(Cluster.objects.filter(enabled=True).order_by("name"))
    parts.clusters = {c.name: c for c in clusters}
    flavor_rows = list(Flavor.objects.values("id", "name", "gpu_memory_gib"))
    parts.flavors = {f["name"]: f["id"] for f in flavor_rows}
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
    live = list(
        Workload.objects.filter(state__in=[S.PENDING, S.RESERVED, S.RUNNING, S.PREEMPTING],
                                needs_approval=False)
        .select_related("queue", "owner", "team")
        .order_by("submitted_at", "id")
    )
    ids = [w.pk for w in live]
    for ps in PodSet.objects.filter(workload_id__in=ids).order_by("workload_id", "index").values(
        "workload_id", "index", "count", "flavors", "gpus", "cpu", "memory_gib",
        "gpu_memory_gib"
    ):
        parts.pod_sets.setdefault(ps["workload_id"], []).append(ps)
    open_adm = {
        a.workload_id: a
        for a in Admission.objects.filter(workload_id__in=ids, ended_at__isnull=True)
    }

    pending_rows = [w for w in live if w.state == S.PENDING]
    ctx = extensions.CycleContext(
        now=now, queue_paths=list(specs), clusters=[c.name for c in clusters],
        pending=[
            extensions.PendingInfo(
                id=w.pk, name=w.name, queue_path=w.queue.path,
                team=w.team.name if w.team else None, owner=w.owner.get_username(),
                priority_class=priorities[w.priority_class_id].name, labels=w.labels,
                dataset=w.dataset,
                gpus=sum(p["count"] * p["gpus"] for p in parts.pod_sets.get(w.pk, [])),
                flavors=tuple((parts.pod_sets.get(w.pk) or [{"flavors": []}])[0]["flavors"]),
            )
            for w in pending_rows
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

    def spec_of(w: Workload) -> engine.WorkloadSpec:
        pc = priorities[w.priority_class_id]
        allowed = ctx.allowed_clusters.get(w.pk)
        return engine.WorkloadSpec(
            name=str(w.pk), queue=w.queue.path, display_name=w.name,
            pod_sets=tuple(
                engine.PodSetSpec(count=p["count"], flavors=tuple(p["flavors"]), gpus=p["gpus"],
                                  cpu=_f(p["cpu"]), memory_gib=_f(p["memory_gib"]),
                                  gpu_memory_gib=p["gpu_memory_gib"])
                for p in parts.pod_sets.get(w.pk, [])
            ),
            submitted_at=w.submitted_at.timestamp(), priority=pc.value,
            priority_class=pc.name, can_preempt=pc.can_preempt, preemptible=w.preemptible,
            checkpoint=w.checkpoint, termination_grace_s=float(w.termination_grace_s),
            strategy=w.strategy, dataset=w.dataset,
            topology_same=str((w.topology or {}).get("same", "")),
            labels={str(k): str(v) for k, v in (w.labels or {}).items()},
            allowed_clusters=frozenset(allowed) if allowed is not None else None,
            allowed_policy=ctx.cluster_reasons.get(w.pk, ""),
            not_before=ts(w.not_before), backoff_count=w.backoff_count,
        )

    pending: list[engine.WorkloadSpec] = []
    admitted: list[engine.AdmittedWorkload] = []
    waiting: dict[str, list[str]] = defaultdict(list)
    for w in live:
        parts.workloads[str(w.pk)] = w
        if w.state == S.PENDING:
            pending.append(spec_of(w))
            continue
        adm = open_adm.get(w.pk)
        if adm is None:
            logger.error("workload %s is %s without an open admission; left out of the cycle",
                         w.pk, w.state)
            continue
        parts.admissions[str(w.pk)] = adm
        cluster = next((c for c in clusters if c.pk == adm.cluster_id), None)
        if w.state == S.PREEMPTING and w.preempted_by_id:
            waiting[str(w.preempted_by_id)].append(str(w.pk))
        admitted.append(engine.AdmittedWorkload(
            workload=spec_of(w), cluster=cluster.name if cluster else str(adm.cluster_id),
            flavor=flavor_name[adm.flavor_id], nodes=tuple(adm.nodes), borrowed=adm.borrowed,
            admitted_at=adm.reserved_at.timestamp(),
            running=adm.running_at is not None, admission_seq=adm.pk,
            grace_until=ts(w.preempt_deadline) if w.state == S.PREEMPTING else None,
            preempted_by=str(w.preempted_by_id or ""),
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
                 for q, e, f in rows)


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
    pending: int = 0
    seconds: float = 0.0
    dispatch_clusters: set[int] = field(default_factory=set)
    suspend_admissions: list[int] = field(default_factory=list)
    delete_admissions: list[int] = field(default_factory=list)


def cycle_run(*, now: datetime | None = None, wait: bool = False,
              after_snapshot: Any = None) -> CycleReport:
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
        transaction.on_commit(lambda: _after_commit(report))
    report.seconds = time.monotonic() - started
    return report


def _after_commit(report: CycleReport) -> None:
    from scheduling import tasks

    for cluster_id in sorted(report.dispatch_clusters):
        tasks.dispatch_cluster.delay(cluster_id)
    for admission_id in report.suspend_admissions:
        tasks.backend_suspend.delay(admission_id)
    for admission_id in report.delete_admissions:
        tasks.backend_delete.delay(admission_id)


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
    Admission.objects.bulk_update(closed, ["ended_at", "end_reason"])
    Workload.objects.bulk_update(victims, [*STATE_FIELDS, "progress_s", "preempt_deadline"])
    WorkloadEvent.objects.bulk_create(events)


def _apply(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
           report: CycleReport) -> None:
    """Write the engine's decisions: bulk inserts and updates, in the caller's transaction."""
    events: list[WorkloadEvent] = []
    changed: dict[int, Workload] = {}
    new_admissions: list[Admission] = []
    closed: list[Admission] = []

    for adm in result.admitted:
        w = parts.workloads[adm.workload]
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

    for pre in result.preempted:
        w = parts.workloads[pre.workload]
        by = parts.workloads.get(pre.by)
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
        w = parts.workloads[rej.workload]
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
        w = parts.workloads[rel.workload]
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

    for name, reason in result.reasons.items():
        w = parts.workloads.get(name)
        if w is None or w.state != S.PENDING:
            continue
        code = str(reason.code)
        if code != w.reason_code:
            # The same code in consecutive cycles is recorded once (its numbers may move).
            events.append(event_new(w, EventType.REASON, at=now, code=code,
                                    message=reason.message))
        if code != w.reason_code or reason.message != w.reason_message:
            w.reason_code, w.reason_message = code, reason.message
            changed[w.pk] = w

    if closed:
        Admission.objects.bulk_update(closed, ["ended_at", "end_reason"])
    if new_admissions:
        Admission.objects.bulk_create(new_admissions)
    if changed:
        Workload.objects.bulk_update(
            list(changed.values()),
            [*STATE_FIELDS, "reason_code", "reason_message", "preempt_deadline",
             "preempt_kind", "preempted_by", "not_before", "backoff_count"],
            batch_size=500)
    if events:
        WorkloadEvent.objects.bulk_create(events, batch_size=1000)


# --- submission check -------------------------------------------------------------------------

def request_check(workload: Workload, pod_sets: list[PodSet], *, now: datetime
                  ) -> list[tuple[str, str]]:
    """Reasons a new request can never fit (empty if it may); run at submission."""
    snapshot, parts = _static_snapshot(now)
    spec = engine.WorkloadSpec(
        name=str(workload.pk), queue=workload.queue.path, display_name=workload.name,
        pod_sets=tuple(
            engine.PodSetSpec(count=p.count, flavors=tuple(p.flavors), gpus=p.gpus,
                              cpu=_f(p.cpu), memory_gib=_f(p.memory_gib),
                              gpu_memory_gib=p.gpu_memory_gib)
            for p in pod_sets),
        submitted_at=now.timestamp(), priority=workload.priority_class.value,
        priority_class=workload.priority_class.name,
        can_preempt=workload.priority_class.can_preempt, preemptible=workload.preemptible,
        checkpoint=workload.checkpoint, termination_grace_s=float(workload.termination_grace_s),
        strategy=workload.strategy, dataset=workload.dataset,
        topology_same=str((workload.topology or {}).get("same", "")),
    )
    reasons = check_request(spec, snapshot)
    return [(str(r.code), r.message) for r in reasons]


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
