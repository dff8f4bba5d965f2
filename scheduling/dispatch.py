"""Phase two of dispatch, and everything that follows a workload on its cluster.

- `cluster_dispatch`: create the admitted workloads' Jobs (suspended) and start them. A local
  refusal (DispatchRefused) releases the reservation, lowers the cluster's health for a while
  and records both steps; the next cycle places the workload elsewhere.
- `admission_suspend` / `admission_delete`: preemption and cleanup on the backend.
- `cluster_sync`: pod status (reserved -> running -> finished / failed) and node inventory.
- `workloads_maintain`: delete finished workloads' objects after a TTL; reclaim workloads stuck
  in a state past a limit, with an event and a log line.

Backend calls happen outside the scheduling lock (they may be slow); the state changes they
cause are written under it, after re-reading the rows, so a concurrent cycle never sees half.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Mod
from django.utils import timezone

from core.history import Source, history_context
from scheduling.backends.base import (
    BackendError,
    BatchDispatch,
    DispatchOutcome,
    DispatchRefused,
    FlavorMatch,
    Phase,
    PodSetSpec,
    WorkloadRef,
    WorkloadSpec,
    get_backend,
)
from scheduling.backends.base import (
    EventType as K8sEventType,
)
from scheduling.cycle import LOCK_KEY, bulk_set, insert_rows, scheduling_lock
from scheduling.models import (
    Admission,
    Cluster,
    EndReason,
    EventType,
    Node,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.services import event_new, workload_transition

logger = logging.getLogger(__name__)
S = WorkloadState
DISPATCH_LOCK_BASE = LOCK_KEY + 1000  # + cluster id x 64 + shard
DISPATCH_SHARDS = 4


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, "ALLOT_WORKERS", {}).get(name, default))


def penalty_s() -> float:
    """How long a refused dispatch lowers the cluster's health."""
    return _setting("dispatch_penalty_s", 300.0)


def penalty() -> float:
    """How much a refused dispatch lowers the cluster's health (below the 0.5 threshold)."""
    return _setting("dispatch_penalty", 0.6)


def cleanup_ttl_s() -> float:
    """How long finished workloads' cluster objects are kept (for logs and inspection)."""
    return _setting("cleanup_ttl_s", 600.0)


def namespace_of(workload: Workload) -> str:
    """The leaf queue's namespace (its path made DNS-safe when none is set)."""
    return workload.queue.namespace or workload.queue.path.replace("/", "-")


def workload_ref(admission: Admission) -> WorkloadRef:
    """The backend reference of an admission's workload (from database facts)."""
    w = admission.workload
    return WorkloadRef.for_workload(
        namespace=namespace_of(w), workload_id=w.pk,
        pod_set_indexes=[ps.index for ps in w.pod_sets.all()])


def workload_spec(admission: Admission) -> WorkloadSpec:
    """What the backend needs to run an admission: pod sets on its flavor and nodes."""
    w = admission.workload
    flavor = admission.flavor
    pod_sets = []
    k = 0
    for ps in w.pod_sets.all():
        nodes = tuple(admission.nodes[k:k + ps.count])
        k += ps.count
        pod_sets.append(PodSetSpec(
            index=ps.index, count=ps.count, flavor=flavor.name, gpus=ps.gpus, cpu=ps.cpu,
            memory_gib=ps.memory_gib, node_selector=dict(flavor.node_selector or {}),
            nodes=nodes))
    duration = None
    if w.duration_hint_s is not None:
        duration = max(0.0, float(w.duration_hint_s) - w.progress_s)
    return WorkloadSpec(
        workload_id=w.pk, name=w.name, namespace=namespace_of(w), queue_path=w.queue.path,
        pod_sets=tuple(pod_sets), image=w.image, command=tuple(w.command or ()),
        priority_class=w.priority_class.name, termination_grace_s=w.termination_grace_s,
        duration_s=duration, labels={})


def _admissions(**filters: object) -> list[Admission]:
    return list(
        Admission.objects.filter(**filters)
        .select_related("workload__queue", "workload__priority_class", "flavor", "cluster")
        .prefetch_related("workload__pod_sets")
        .order_by("pk")
    )


@dataclass
class DispatchReport:
    """What one dispatch pass did."""

    started: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    errors_ids: set[int] = field(default_factory=set)
    skipped: bool = False  # another pass held the cluster


@contextlib.contextmanager
def cluster_lock(cluster_id: int, shard: int, *, wait: bool = False) -> Iterator[bool]:
    """One writer of a shard of a cluster's objects at a time: dispatch passes and deletions
    (PostgreSQL; elsewhere always granted). A workload always falls in the shard
    `id % DISPATCH_SHARDS`, so several passes dispatch to one cluster in parallel while the
    objects of one workload still have one writer at a time.

    Deletions wait for it so an old interval's delete never lands after a new interval's
    create of the same Job names. A session-level advisory lock, so no transaction stays open
    while we talk to the cluster; a dispatch pass that finds it taken skips (the holder, or the
    next beat, does the work).
    """
    with cluster_locks(cluster_id, [shard], wait=wait) as held:
        yield bool(held)


def _lock_key(cluster_id: int, shard: int) -> int:
    return DISPATCH_LOCK_BASE + int(cluster_id) * 64 + int(shard)


@contextlib.contextmanager
def cluster_locks(cluster_id: int, shards: list[int], *, wait: bool = False,
                  wait_s: float | None = None) -> Iterator[list[int]]:
    """The shard locks of `cluster_lock` for several shards; yields the shards held.

    All are tried in one round trip; with `wait` the missing ones are then waited for one at
    a time in key order (so two waiters never deadlock), each for at most `wait_s` seconds
    when given (a shard still busy then is left out)."""
    if connection.vendor != "postgresql" or not shards:
        yield list(shards)
        return
    keys = {s: _lock_key(cluster_id, s) for s in shards}
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join("pg_try_advisory_lock(%s)" for _ in shards),
                       [keys[s] for s in shards])
        held = [s for s, ok in zip(shards, cursor.fetchone(), strict=True) if ok]
        if wait:
            for s in sorted(set(shards) - set(held), key=keys.__getitem__):
                if _lock_wait(cursor, keys[s], wait_s):
                    held.append(s)
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT " + ", ".join("pg_advisory_unlock(%s)" for _ in held),
                               [keys[s] for s in held])


def _lock_wait(cursor: Any, key: int, wait_s: float | None) -> bool:
    """Wait for one session advisory lock (at most `wait_s` seconds when given)."""
    from django.db import OperationalError

    if wait_s is None:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
        return True
    if connection.in_atomic_block:
        # A timed-out statement would abort the caller's transaction: try once instead.
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        return bool(cursor.fetchone()[0])
    cursor.execute(f"SET lock_timeout = '{max(1, int(wait_s * 1000))}ms'")
    try:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
        return True
    except OperationalError:
        return False
    finally:
        cursor.execute("RESET lock_timeout")


# The columns a dispatch pass reads, in one query (no model instances on the hot path).
DISPATCH_FIELDS = (
    "pk", "workload_id", "nodes", "flavor__name", "flavor__node_selector", "cluster__name",
    "workload__name", "workload__queue__path", "workload__queue__namespace",
    "workload__image", "workload__command", "workload__priority_class__name",
    "workload__termination_grace_s", "workload__duration_hint_s", "workload__progress_s",
)


def cluster_dispatch(*, cluster_id: int, now: datetime | None = None,
                     batch: int = 500, shard: int | None = None,
                     wait_s: float | None = None) -> DispatchReport:
    """Create and start every reserved, undispatched workload of a cluster (or of one shard);
    shards another pass holds are left to it (`skipped`), after waiting up to `wait_s` for
    them when given.

    A pass costs a few queries per batch, not per workload: one to read the batch, one for its
    pod sets, the backend's (one batch call on a backend with `dispatch_many`), and one
    transaction under the scheduling lock recording what started (and what already runs).
    """
    from django.db.models import Exists, OuterRef

    report = DispatchReport()
    shards = [shard] if shard is not None else list(range(DISPATCH_SHARDS))
    with cluster_locks(cluster_id, shards, wait=wait_s is not None, wait_s=wait_s) as held:
        if len(held) < len(shards):
            report.skipped = True
        if not held:
            return report
        cluster = Cluster.objects.get(pk=cluster_id)
        previous = Admission.objects.filter(
            workload_id=OuterRef("workload_id"), cluster_id=cluster_id,
            cleaned_at__isnull=True, ended_at__isnull=False)
        while True:
            qs = (Admission.objects.filter(cluster_id=cluster_id, ended_at__isnull=True,
                                           dispatched_at__isnull=True,
                                           workload__state=S.RESERVED)
                  .exclude(workload_id__in=report.errors_ids))
            if len(held) < DISPATCH_SHARDS:
                qs = qs.annotate(shard=Mod("workload_id", DISPATCH_SHARDS)).filter(
                    shard__in=held)
            rows = list(qs.annotate(previous=Exists(previous)).order_by("pk")
                        .values(*DISPATCH_FIELDS, "previous")[:batch])
            if not rows:
                break
            _dispatch_batch(cluster, rows, now, report)
            if len(rows) < batch:
                break
    return report


def _spec_of(row: dict[str, Any], pod_sets: list[dict[str, Any]]) -> WorkloadSpec:
    """The backend's view of one admission row (see DISPATCH_FIELDS)."""
    sets, k = [], 0
    for ps in pod_sets:
        sets.append(PodSetSpec(
            index=ps["index"], count=ps["count"], flavor=row["flavor__name"], gpus=ps["gpus"],
            cpu=ps["cpu"], memory_gib=ps["memory_gib"],
            node_selector=dict(row["flavor__node_selector"] or {}),
            nodes=tuple(row["nodes"][k:k + ps["count"]])))
        k += ps["count"]
    hint = row["workload__duration_hint_s"]
    path = row["workload__queue__path"]
    return WorkloadSpec(
        workload_id=row["workload_id"], name=row["workload__name"],
        namespace=row["workload__queue__namespace"] or path.replace("/", "-"), queue_path=path,
        pod_sets=tuple(sets), image=row["workload__image"],
        command=tuple(row["workload__command"] or ()),
        priority_class=row["workload__priority_class__name"],
        termination_grace_s=row["workload__termination_grace_s"],
        duration_s=None if hint is None else max(0.0, float(hint) - row["workload__progress_s"]),
        labels={})


def _dispatch_batch(cluster: Cluster, rows: list[dict[str, Any]], now: datetime | None,
                    report: DispatchReport) -> None:
    backend = get_backend(cluster)
    pod_sets: dict[int, list[Any]] = {}
    for ps in PodSet.objects.filter(workload_id__in=[r["workload_id"] for r in rows]).order_by(
            "workload_id", "index").values("workload_id", "index", "count", "gpus", "cpu",
                                           "memory_gib"):
        pod_sets.setdefault(ps["workload_id"], []).append(ps)
    specs = [_spec_of(r, pod_sets.get(r["workload_id"], [])) for r in rows]
    previous = frozenset(r["workload_id"] for r in rows if r["previous"])
    if isinstance(backend, BatchDispatch):
        try:
            outcomes = backend.dispatch_many(specs, replace=previous)
        except BackendError as exc:
            outcomes = [DispatchOutcome(ref=spec.ref, error=exc) for spec in specs]
    else:
        # One database transaction around the batch: a database-backed cluster then commits
        # once per batch instead of once per call; a remote cluster is unaffected.
        with transaction.atomic():
            outcomes = [_create_and_start(backend, cluster, spec, spec.workload_id in previous)
                        for spec in specs]
    started: list[tuple[dict[str, Any], bool]] = []
    refused: list[tuple[dict[str, Any], DispatchRefused]] = []
    for row, outcome in zip(rows, outcomes, strict=True):
        if outcome.refused is not None:
            refused.append((row, outcome.refused))
        elif outcome.error is not None:
            # Retryable: the task retries; the pods-ready timeout bounds how long.
            report.errors.append(f"{row['workload_id']}: {outcome.error}")
            report.errors_ids.add(row["workload_id"])
            logger.warning("cluster %s: dispatch of workload %s failed: %s", cluster.name,
                           row["workload_id"], outcome.error)
        else:
            started.append((row, outcome.running))
    now = now or timezone.now()
    _dispatched(cluster, started, now, report)
    if refused:
        with scheduling_lock(wait=True):
            for row, refusal in refused:
                if _refused(row, refusal, now):
                    report.refused.append(row["workload_id"])
        _nudge()


def dispatch_in_cycle(*, now: datetime, admissions: list[Admission], parts: Any,
                      events: list[WorkloadEvent], report: Any) -> None:
    """Phase two inside the cycle's transaction, for clusters whose state lives in this
    database (`joins_transaction`: the simulated backend).

    The cycle's new admissions (unsaved) on such clusters are created and started with one
    `dispatch_many`; started ones are saved dispatched (and running, when their pods run at
    once), a refusal ends the reservation, lowers the cluster's health and requeues the
    workload as `_refused` does, all with their events, in the cycle's transaction: a crash
    leaves neither a reservation nor a Job behind. Backend errors leave the admission to the
    usual dispatch pass after commit. Other clusters are dispatched after commit as before.
    On unless ALLOT_WORKERS["dispatch_in_cycle"] is false (ALLOT_DISPATCH_IN_CYCLE=0).
    """
    if not getattr(settings, "ALLOT_WORKERS", {}).get("dispatch_in_cycle", True):
        return
    by_cluster: dict[int, list[Admission]] = {}
    for adm in admissions:
        by_cluster.setdefault(adm.cluster_id, []).append(adm)
    clusters = {c.pk: c for c in parts.clusters.values()}
    for cluster_id, adms in by_cluster.items():
        cluster = clusters[cluster_id]
        backend = get_backend(cluster)
        if not (isinstance(backend, BatchDispatch)
                and getattr(backend, "joins_transaction", False)):
            continue
        workloads = [parts.workloads[str(a.workload_id)] for a in adms]
        previous = frozenset(Admission.objects.filter(
            workload_id__in=[w.pk for w in workloads], cluster_id=cluster_id,
            cleaned_at__isnull=True, ended_at__isnull=False).values_list(
            "workload_id", flat=True))
        flavor_names = {v: k for k, v in parts.flavors.items()}
        specs = []
        for adm, w in zip(adms, workloads, strict=True):
            row = parts.rows[str(w.pk)]
            flavor = flavor_names[adm.flavor_id]
            specs.append(_spec_of({
                "workload_id": w.pk, "nodes": adm.nodes, "flavor__name": flavor,
                "flavor__node_selector": parts.node_selectors.get(flavor, {}),
                "workload__name": w.name, "workload__queue__path": row["queue__path"],
                "workload__queue__namespace": row["queue__namespace"],
                "workload__image": w.image, "workload__command": w.command,
                "workload__priority_class__name": parts.priority_names.get(
                    w.priority_class_id, ""),
                "workload__termination_grace_s": w.termination_grace_s,
                "workload__duration_hint_s": w.duration_hint_s,
                "workload__progress_s": w.progress_s,
            }, parts.pod_sets.get(w.pk, [])))
        try:
            outcomes = backend.dispatch_many(specs, replace=previous)
        except BackendError as exc:
            logger.warning("cluster %s: dispatch in the cycle failed, left to the dispatch "
                           "pass: %s", cluster.name, exc)
            continue
        handled = 0
        for adm, w, outcome in zip(adms, workloads, outcomes, strict=True):
            pods = len(adm.nodes)
            if outcome.refused is not None:
                _refused_in_cycle(cluster, adm, w, outcome.refused, now, events)
                report.refused.append(w.pk)
                handled += 1
                continue
            if outcome.error is not None:
                continue
            adm.dispatched_at = now
            events.append(event_new(
                w, EventType.DISPATCHED, at=now, payload={"cluster": cluster.name},
                message=f"created on {cluster.name} and started "
                f"({pods} pods on {len(set(adm.nodes))} nodes)"))
            if outcome.running:
                adm.running_at = now
                events.append(workload_transition(
                    w, S.RUNNING, at=now, event_type=EventType.RUNNING,
                    message=f"all {pods} pods running on {cluster.name}"))
            handled += 1
        if handled == len(adms):
            report.dispatch_clusters.discard(cluster_id)


def _refused_in_cycle(cluster: Cluster, adm: Admission, w: Workload, refusal: DispatchRefused,
                      now: datetime, events: list[WorkloadEvent]) -> None:
    """`_refused` for an admission the cycle has not saved yet."""
    adm.ended_at, adm.end_reason, adm.cleaned_at = now, EndReason.REFUSED, now
    until = now + timedelta(seconds=penalty_s())
    Cluster.objects.filter(pk=cluster.pk).update(health_penalty=penalty(),
                                                 health_penalty_until=until)
    cluster.health_penalty, cluster.health_penalty_until = penalty(), until
    message = (f"cluster {cluster.name} refused the dispatch ({refusal.reason}: "
               f"{refusal.message}); reservation released, cluster health "
               f"{cluster.health:g} -> {cluster.effective_health(now):g} for "
               f"{penalty_s():.0f}s; will be placed again")
    events.append(event_new(w, EventType.REFUSED, at=now, code="DISPATCH_REFUSED",
                            message=message,
                            payload={"cluster": cluster.name, "reason": str(refusal.reason)}))
    events.append(workload_transition(
        w, S.PENDING, at=now, event_type=EventType.REQUEUED,
        message=f"back in the queue after the refusal by {cluster.name}"))
    w.reason_code, w.reason_message = "DISPATCH_REFUSED", message
    logger.warning("workload %s refused by %s: %s", w.pk, cluster.name, refusal)


def _create_and_start(backend: Any, cluster: Cluster, spec: WorkloadSpec,
                      previous: bool) -> DispatchOutcome:
    """Dispatch one workload on a backend without `dispatch_many`."""
    try:
        if previous:
            # A previous interval's Jobs carry the same names: remove them first, or the
            # create would find them and resume the old placement.
            backend.delete_workload(spec.ref)
        ref = backend.create_workload(spec)
        backend.start_workload(ref)
    except DispatchRefused as refusal:
        try:
            backend.delete_workload(spec.ref)
        except BackendError:
            logger.warning("cluster %s: could not clean up refused workload %s",
                           cluster.name, spec.workload_id, exc_info=True)
        return DispatchOutcome(ref=spec.ref, refused=refusal)
    except BackendError as exc:
        return DispatchOutcome(ref=spec.ref, error=exc)
    return DispatchOutcome(ref=ref)


def _dispatched(cluster: Cluster, started: list[tuple[dict[str, Any], bool]], now: datetime,
                report: DispatchReport) -> None:
    """Record the started ones whose admission is still open, and move those whose pods
    already run to `running`, in one transaction.

    No scheduling lock: on PostgreSQL both writes are conditional UPDATEs (`... AND ended_at
    IS NULL AND dispatched_at IS NULL`, `... AND state = 'reserved'`) returning the rows they
    changed, so a cycle that ended the admission or preempted the workload meanwhile wins, and
    the dispatch never waits behind a cycle. Elsewhere the scheduling lock serialises it.
    """
    if not started:
        return
    if connection.vendor != "postgresql":
        with scheduling_lock(wait=True):
            _dispatched_locked(cluster, started, now, report)
        return
    pks = [r["pk"] for r, _ in started]
    running_pks = [r["pk"] for r, running in started if running]
    adm_table, w_table = Admission._meta.db_table, Workload._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{adm_table}" SET "dispatched_at" = %s, "running_at" = CASE WHEN '
            f'"id" = ANY(%s) THEN %s ELSE "running_at" END WHERE "id" = ANY(%s) AND '
            f'"ended_at" IS NULL AND "dispatched_at" IS NULL RETURNING "id"',
            [now, running_pks, now, pks])
        recorded = {row[0] for row in cursor.fetchall()}
        runs = [r["workload_id"] for r, running in started if running and r["pk"] in recorded]
        ran: set[int] = set()
        if runs:
            cursor.execute(
                f'UPDATE "{w_table}" SET "state" = %s, "state_changed_at" = %s '
                f'WHERE "id" = ANY(%s) AND "state" = %s RETURNING "id"',
                [S.RUNNING, now, runs, S.RESERVED])
            ran = {row[0] for row in cursor.fetchall()}
        _dispatch_events(cluster, [(r, r["workload_id"] in ran) for r, _ in started
                                   if r["pk"] in recorded], now, report)


def _dispatched_locked(cluster: Cluster, started: list[tuple[dict[str, Any], bool]],
                       now: datetime, report: DispatchReport) -> None:
    fresh = dict(Admission.objects.filter(
        pk__in=[r["pk"] for r, _ in started], ended_at__isnull=True,
        dispatched_at__isnull=True).values_list("pk", "workload__state"))
    done = [(r, running and fresh[r["pk"]] == S.RESERVED) for r, running in started
            if r["pk"] in fresh]
    if not done:
        return
    admissions = [Admission(pk=r["pk"], dispatched_at=now, running_at=now if running else None)
                  for r, running in done]
    bulk_set(Admission, admissions, ["dispatched_at", "running_at"])
    runs = [r["workload_id"] for r, running in done if running]
    if runs:
        Workload.objects.filter(pk__in=runs, state=S.RESERVED).update(
            state=S.RUNNING, state_changed_at=now)
    _dispatch_events(cluster, done, now, report)


def _dispatch_events(cluster: Cluster, done: list[tuple[dict[str, Any], bool]], now: datetime,
                     report: DispatchReport) -> None:
    events = []
    for r, running in done:
        pods = len(r["nodes"])
        events.append(WorkloadEvent(
            workload_id=r["workload_id"], at=now, type=EventType.DISPATCHED,
            message=f"created on {cluster.name} and started "
            f"({pods} pods on {len(set(r['nodes']))} nodes)",
            payload={"cluster": cluster.name}))
        if running:
            events.append(WorkloadEvent(
                workload_id=r["workload_id"], at=now, type=EventType.RUNNING,
                message=f"all {pods} pods running on {cluster.name}"))
    insert_rows(WorkloadEvent, events)
    report.started.extend(r["workload_id"] for r, _ in done)


def _refused(row: dict[str, Any], refusal: DispatchRefused, now: datetime) -> bool:
    """Release the reservation and lower the cluster's health for a while (both recorded).

    Runs under the scheduling lock; False when the admission had already ended."""
    w = Workload.objects.select_for_update().get(pk=row["workload_id"])
    fresh = Admission.objects.select_for_update().get(pk=row["pk"])
    if fresh.ended_at is not None or w.state != S.RESERVED:
        return False
    fresh.ended_at, fresh.end_reason = now, EndReason.REFUSED
    fresh.cleaned_at = now
    fresh.save(update_fields=["ended_at", "end_reason", "cleaned_at"])
    cluster = Cluster.objects.select_for_update().get(pk=fresh.cluster_id)
    cluster.health_penalty = penalty()
    cluster.health_penalty_until = now + timedelta(seconds=penalty_s())
    cluster.save(update_fields=["health_penalty", "health_penalty_until"])
    message = (f"cluster {cluster.name} refused the dispatch ({refusal.reason}: "
               f"{refusal.message}); reservation released, cluster health "
               f"{cluster.health:g} -> {cluster.effective_health(now):g} for "
               f"{penalty_s():.0f}s; will be placed again")
    events = [
        event_new(w, EventType.REFUSED, at=now, code="DISPATCH_REFUSED", message=message,
                  payload={"cluster": cluster.name, "reason": str(refusal.reason)}),
        workload_transition(w, S.PENDING, at=now, event_type=EventType.REQUEUED,
                            message=f"back in the queue after the refusal by {cluster.name}"),
    ]
    w.reason_code, w.reason_message = "DISPATCH_REFUSED", message
    w.save(update_fields=["state", "state_changed_at", "reason_code", "reason_message"])
    WorkloadEvent.objects.bulk_create(events)
    logger.warning("workload %s refused by %s: %s", w.pk, cluster.name, refusal)
    return True


def _nudge() -> None:
    from scheduling.services import cycle_nudge

    cycle_nudge()


def admission_suspend(*, admission_id: int) -> None:
    """Suspend a preempted workload's Jobs with its grace period (and say why on the Jobs)."""
    admissions_suspend(admission_ids=[admission_id])


def admissions_suspend(*, admission_ids: list[int]) -> None:
    """Suspend several preempted workloads (one pass per cluster, one transaction each)."""
    by_cluster: dict[int, list[Admission]] = {}
    for adm in _admissions(pk__in=admission_ids, dispatched_at__isnull=False):
        by_cluster.setdefault(adm.cluster_id, []).append(adm)
    if not by_cluster:
        return
    messages = {}
    for wid, message in (WorkloadEvent.objects.filter(
            workload_id__in=[a.workload_id for adms in by_cluster.values() for a in adms],
            type=EventType.PREEMPTED).order_by("at", "id").values_list("workload_id", "message")):
        messages[wid] = message  # the latest preemption's reason
    for adms in by_cluster.values():
        backend = get_backend(adms[0].cluster)
        with transaction.atomic():
            for adm in adms:
                ref = workload_ref(adm)
                backend.suspend_workload(ref, adm.workload.termination_grace_s)
                if adm.workload_id in messages:
                    backend.post_event(ref, K8sEventType.WARNING, "Preempted",
                                       messages[adm.workload_id][:1000])


def admission_delete(*, admission_id: int, now: datetime | None = None) -> None:
    """Delete an ended admission's Jobs (idempotent) and note when."""
    admissions_delete(admission_ids=[admission_id], now=now)


def admissions_delete(*, admission_ids: list[int], now: datetime | None = None) -> None:
    """Delete ended admissions' Jobs, one pass per cluster under its lock; note when."""
    by_cluster: dict[int, list[Admission]] = {}
    for adm in _admissions(pk__in=admission_ids, cleaned_at__isnull=True):
        by_cluster.setdefault(adm.cluster_id, []).append(adm)
    for cluster_id, cluster_adms in by_cluster.items():
        backend = get_backend(cluster_adms[0].cluster)
        for part in range(DISPATCH_SHARDS):
            adms = [a for a in cluster_adms if a.workload_id % DISPATCH_SHARDS == part]
            if adms:
                _delete_shard(backend, cluster_id, part, adms, now)


def _delete_shard(backend: Any, cluster_id: int, part: int, adms: list[Admission],
                  now: datetime | None) -> None:
    with cluster_lock(cluster_id, part, wait=True):
        newer = set(Admission.objects.filter(
            cluster_id=cluster_id, workload_id__in=[a.workload_id for a in adms],
            pk__gt=min(a.pk for a in adms)).values_list("workload_id", "pk"))
        with transaction.atomic():
            for adm in adms:
                # A newer interval on the same cluster owns the Job names now (its dispatch
                # removed the old objects first): deleting would kill the new run.
                if any(w == adm.workload_id and pk > adm.pk for w, pk in newer):
                    continue
                backend.delete_workload(workload_ref(adm))
        Admission.objects.filter(pk__in=[a.pk for a in adms]).update(
            cleaned_at=now or timezone.now())


# --- sync -------------------------------------------------------------------------------------

@dataclass
class SyncReport:
    """What one sync pass saw and changed."""

    running: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    nodes_changed: int = 0


def cluster_sync(*, cluster_id: int, now: datetime | None = None, nodes: bool = True,
                 nudge: bool = True, workload_ids: frozenset[int] | set[int] | None = None
                 ) -> SyncReport:
    """Follow pods of the cluster's dispatched workloads (only `workload_ids`, when a watch
    said which changed); refresh its node inventory.

    Reads are plain rows; the scheduling lock is taken only when a state must change, and
    only those workloads are written.
    """
    report = SyncReport()
    cluster = Cluster.objects.get(pk=cluster_id)
    backend = get_backend(cluster)
    if nodes:
        report.nodes_changed = _sync_nodes(cluster, backend)
    if workload_ids is not None and not workload_ids:
        return report
    qs = Admission.objects.filter(cluster_id=cluster_id, ended_at__isnull=True,
                                  dispatched_at__isnull=False,
                                  workload__state__in=[S.RESERVED, S.RUNNING, S.PREEMPTING])
    if workload_ids is not None:
        qs = qs.filter(workload_id__in=list(workload_ids))
    rows = list(qs.order_by("pk").values(
        "pk", "workload_id", "workload__state", "workload__queue__path",
        "workload__queue__namespace"))
    if not rows:
        return report
    indexes: dict[int, list[int]] = {}
    for wid, index in PodSet.objects.filter(
            workload_id__in=[r["workload_id"] for r in rows]).order_by(
            "workload_id", "index").values_list("workload_id", "index"):
        indexes.setdefault(wid, []).append(index)
    refs = [WorkloadRef.for_workload(
        namespace=r["workload__queue__namespace"] or r["workload__queue__path"].replace("/", "-"),
        workload_id=r["workload_id"], pod_set_indexes=indexes.get(r["workload_id"], []))
        for r in rows]
    try:
        statuses = backend.workload_statuses(refs)
    except BackendError as exc:
        logger.warning("cluster %s: workload status failed: %s", cluster.name, exc)
        return report
    observed = [(r["pk"], r["workload_id"], status.phase, status.message)
                for r, status in zip(rows, statuses, strict=True)
                if _moves(r["workload__state"], status.phase)]
    if not observed:
        return report
    now = now or timezone.now()
    with scheduling_lock(wait=True):
        _apply_status(cluster.name, observed, now, report)
    if nudge and (report.finished or report.failed or report.lost):
        _nudge()
    return report


def _moves(state: str, phase: Phase) -> bool:
    """Whether a workload in `state` whose pods are in `phase` changes state."""
    if phase == Phase.RUNNING:
        return state == S.RESERVED
    if phase in (Phase.SUCCEEDED, Phase.FAILED):
        return state in (S.RESERVED, S.RUNNING, S.PREEMPTING)
    if phase == Phase.MISSING:
        return state in (S.RUNNING, S.RESERVED)
    return False


def _apply_status(cluster_name: str, observed: list[tuple[int, int, Phase, str]],
                  now: datetime, report: SyncReport) -> None:
    ids = [wid for _, wid, _, _ in observed]
    fresh = {w.pk: w for w in Workload.objects.select_for_update().filter(pk__in=ids)
             .only("id", "name", "state", "state_changed_at", "finished_at", "progress_s",
                   "preempt_deadline").order_by("pk")}
    open_adm = {a.pk: a for a in Admission.objects.select_for_update().filter(
        pk__in=[pk for pk, _, _, _ in observed], ended_at__isnull=True)
        .only("id", "workload_id", "nodes", "borrowed", "running_at", "ended_at",
              "end_reason", "forced")}
    events: list[WorkloadEvent] = []
    changed_w: dict[int, Workload] = {}
    changed_a: dict[int, Admission] = {}
    for adm_pk, wid, phase, message in observed:
        w, a = fresh.get(wid), open_adm.get(adm_pk)
        if w is None or a is None:
            continue
        if phase == Phase.RUNNING and w.state == S.RESERVED:
            a.running_at = now
            changed_a[a.pk] = a
            events.append(workload_transition(
                w, S.RUNNING, at=now, event_type=EventType.RUNNING,
                message=f"all {len(a.nodes)} pods running on {cluster_name}"))
            changed_w[w.pk] = w
            report.running.append(w.pk)
        elif phase == Phase.SUCCEEDED and w.state in (S.RESERVED, S.RUNNING, S.PREEMPTING):
            if a.running_at is None:
                a.running_at = now
            a.ended_at, a.end_reason = now, EndReason.FINISHED
            changed_a[a.pk] = a
            ran = (now - a.running_at).total_seconds()
            w.progress_s += ran
            w.preempt_deadline = None
            events.append(workload_transition(
                w, S.FINISHED, at=now, event_type=EventType.FINISHED,
                message=f"all pods succeeded on {cluster_name}"))
            changed_w[w.pk] = w
            report.finished.append(w.pk)
        elif phase == Phase.FAILED and w.state in (S.RESERVED, S.RUNNING, S.PREEMPTING):
            a.ended_at, a.end_reason = now, EndReason.FAILED
            changed_a[a.pk] = a
            w.preempt_deadline = None
            events.append(workload_transition(
                w, S.FAILED, at=now, event_type=EventType.FAILED,
                message=f"failed on {cluster_name}: {message or 'a pod failed'}"))
            changed_w[w.pk] = w
            report.failed.append(w.pk)
        elif phase == Phase.MISSING and w.state in (S.RUNNING, S.RESERVED):
            # Its Jobs vanished (deleted by hand, cluster rebuilt): back to the queue.
            a.ended_at, a.end_reason, a.forced = now, EndReason.FAILED, a.borrowed
            changed_a[a.pk] = a
            events.append(workload_transition(
                w, S.PENDING, at=now, event_type=EventType.REQUEUED,
                message=f"its Jobs disappeared from {cluster_name}; back in the queue"))
            changed_w[w.pk] = w
            report.lost.append(w.pk)
    if changed_a:
        bulk_set(Admission, list(changed_a.values()),
                 ["running_at", "ended_at", "end_reason", "forced"])
    if changed_w:
        bulk_set(Workload, list(changed_w.values()),
                 ["state", "state_changed_at", "finished_at", "progress_s", "preempt_deadline"])
    insert_rows(WorkloadEvent, events)


# --- watch ------------------------------------------------------------------------------------

WATCH_LOCK_BASE = LOCK_KEY + 500_000  # + cluster id: one watcher per cluster


@dataclass
class WatchReport:
    """What one watch session saw and did."""

    watched: bool = False  # False: another process watches this cluster
    rounds: int = 0
    resyncs: int = 0
    running: int = 0
    ended: int = 0


def watch_interval_s() -> float:
    """The shortest time between two looks at a busy cluster (batches the changes)."""
    return _setting("watch_interval_s", 0.1)


def cluster_watch(*, cluster_id: int, seconds: float,
                  on_freed: Any = None) -> WatchReport:
    """Follow one cluster by watch for `seconds`: sync the workloads the backend says changed,
    as soon as it says so; resync everything at the start and when the bookmark expired.

    One watcher per cluster across every worker (a session advisory lock on PostgreSQL; a
    second caller returns at once with `watched` False). `on_freed()` is called when
    finished, failed or lost workloads released capacity (the workers run the cycle then).
    The periodic full sync (`sync_all`) stays as the fallback.
    """
    import time

    report = WatchReport()
    with _watch_lock(cluster_id) as got:
        if not got:
            return report
        report.watched = True
        cluster = Cluster.objects.get(pk=cluster_id)
        backend = get_backend(cluster)
        deadline = time.monotonic() + seconds
        bookmark = ""
        while (left := deadline - time.monotonic()) > 0:
            began = time.monotonic()
            try:
                if not bookmark:
                    bookmark = backend.watch_workloads(timeout_s=0).resource_version
                    synced = cluster_sync(cluster_id=cluster_id, nodes=False, nudge=False)
                    report.resyncs += 1
                else:
                    seen = backend.watch_workloads(timeout_s=min(left, 5.0),
                                                   resource_version=bookmark)
                    bookmark = "" if seen.expired else seen.resource_version
                    if seen.expired or not seen.changed:
                        continue
                    synced = cluster_sync(cluster_id=cluster_id, nodes=False, nudge=False,
                                          workload_ids=seen.changed)
            except BackendError as exc:
                logger.warning("cluster %s: watch failed: %s", cluster.name, exc)
                bookmark = ""
                time.sleep(min(max(left, 0.0), 1.0))
                continue
            report.rounds += 1
            report.running += len(synced.running)
            freed = len(synced.finished) + len(synced.failed) + len(synced.lost)
            report.ended += freed
            if freed:
                (on_freed or _nudge)()
            rest = watch_interval_s() - (time.monotonic() - began)
            if rest > 0:
                time.sleep(rest)
    return report


@contextlib.contextmanager
def _watch_lock(cluster_id: int) -> Iterator[bool]:
    if connection.vendor != "postgresql":
        yield True
        return
    key = WATCH_LOCK_BASE + int(cluster_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        got = bool(cursor.fetchone()[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


@history_context(Source.SYNC)
def _sync_nodes(cluster: Cluster, backend: object) -> int:
    """Update readiness and allocatable resources of known nodes (new nodes are added).

    A new node is saved (a `sync` row in its history); readiness and capacity of known nodes
    change by UPDATE, with no history: they flap with every look at the cluster.
    """
    from quotas.models import Flavor

    flavors = {f.name: f for f in Flavor.objects.all()}
    matches = [FlavorMatch(name=f.name, node_selector=dict(f.node_selector or {}),
                           interconnect_label=f.interconnect_label) for f in flavors.values()]
    try:
        infos = backend.list_nodes(matches)  # type: ignore[attr-defined]
    except BackendError as exc:
        logger.warning("cluster %s: node inventory failed: %s", cluster.name, exc)
        return 0
    known = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    changed = 0
    for info in infos:
        node = known.get(info.name)
        if info.flavor is None or info.flavor not in flavors:
            continue
        values = {"gpus": info.gpus, "cpu": info.cpu, "memory_gib": info.memory_gib,
                  "ready": info.ready, "rack": info.rack or (node.rack if node else "")}
        if node is None:
            Node.objects.create(cluster=cluster, name=info.name, flavor=flavors[info.flavor],
                                labels=dict(info.labels), **values)
            changed += 1
        elif any(getattr(node, k) != v for k, v in values.items()):
            Node.objects.filter(pk=node.pk).update(**values)
            changed += 1
    seen = {i.name for i in infos}
    gone = [n.pk for name, n in known.items() if name not in seen and n.ready]
    if gone:
        Node.objects.filter(pk__in=gone).update(ready=False)
        changed += len(gone)
    return changed


# --- maintenance ------------------------------------------------------------------------------

@dataclass
class MaintainReport:
    """What a maintenance pass cleaned and reclaimed."""

    cleaned: list[int] = field(default_factory=list)
    reclaimed: list[int] = field(default_factory=list)  # every stuck workload, any state
    requeued: list[int] = field(default_factory=list)  # of those, back in the queue
    failed: list[int] = field(default_factory=list)  # of those, failed for good


# Per non-terminal state: the setting (in ALLOT_WORKERS) naming its limit, and where a workload
# stuck in it goes. Reserved and preempting are moments that should pass on their own: a
# workload stuck there is requeued. Pending and running can last, but not forever: past their
# limit the workload fails with the reason (its quota and capacity are reclaimed).
STUCK_RULES: dict[str, tuple[str, str]] = {
    S.PENDING: ("stuck_pending_s", S.FAILED),
    S.RESERVED: ("stuck_reserved_s", S.PENDING),
    S.RUNNING: ("stuck_running_s", S.FAILED),
    S.PREEMPTING: ("stuck_preempting_s", S.PENDING),
}


def stuck_limit_s(state: str) -> float:
    """How long a workload may stay in `state` before it is reclaimed as stuck (inf: never;
    a limit set to 0 or less turns it off)."""
    conf = getattr(settings, "ALLOT_WORKERS", {})
    timeout = float(getattr(settings, "ALLOT_ENGINE", {}).get("pods_ready_timeout_s", 300.0))
    defaults: dict[str, float] = {
        S.PENDING: 7 * 86400.0,
        # The engine releases reserved work at the pods-ready timeout; twice that means the
        # release itself did not happen (e.g. the cycle kept failing on this workload).
        S.RESERVED: 2 * timeout + 60,
        S.RUNNING: 7 * 86400.0,
        # Requeue happens at the end of grace; past this, the victim did not yield.
        S.PREEMPTING: float(conf.get("preempting_stuck_s", 600.0)),
    }
    if state not in STUCK_RULES:
        return float("inf")
    value = conf.get(STUCK_RULES[state][0])
    limit = defaults[state] if value is None else float(value)
    return limit if limit > 0 else float("inf")


def _human(seconds: float) -> str:
    """Seconds, and days or hours beside them when that many."""
    if seconds >= 2 * 86400:
        return f"{seconds:.0f}s ({seconds / 86400:.1f} days)"
    if seconds >= 2 * 3600:
        return f"{seconds:.0f}s ({seconds / 3600:.1f} h)"
    return f"{seconds:.0f}s"


def workloads_maintain(*, now: datetime | None = None) -> MaintainReport:
    """Clean up ended admissions past the TTL; reclaim workloads stuck past their limit."""
    now = now or timezone.now()
    report = MaintainReport()
    expired = Admission.objects.filter(
        ended_at__lte=now - timedelta(seconds=cleanup_ttl_s()), cleaned_at__isnull=True,
        dispatched_at__isnull=False).values_list("pk", flat=True)[:200]
    for pk in list(expired):
        try:
            admission_delete(admission_id=pk, now=now)
            report.cleaned.append(pk)
        except BackendError as exc:
            logger.warning("cleanup of admission %s failed: %s", pk, exc)
    Admission.objects.filter(ended_at__isnull=False, cleaned_at__isnull=True,
                             dispatched_at__isnull=True).update(cleaned_at=now)

    for state in STUCK_RULES:
        limit_s = stuck_limit_s(state)
        if limit_s == float("inf"):
            continue
        limit = now - timedelta(seconds=limit_s)
        candidates = list(Workload.objects.filter(state=state, state_changed_at__lt=limit)
                          .values_list("pk", flat=True)[:1000])
        if candidates:
            with scheduling_lock(wait=True):
                _reclaim_stuck(state, candidates, limit_s, now, report)
    if report.reclaimed:
        _nudge()
    return report


def _reclaim_stuck(state: str, candidates: list[int], limit_s: float, now: datetime,
                   report: MaintainReport) -> None:
    """Under the scheduling lock: move the workloads still stuck in `state` on, end their
    open admission (capacity reclaimed), record why; their Jobs are deleted after commit."""
    setting, to = STUCK_RULES[state]
    limit = now - timedelta(seconds=limit_s)
    stuck = list(Workload.objects.select_for_update().filter(
        pk__in=candidates, state=state, state_changed_at__lt=limit).order_by("pk"))
    if not stuck:
        return
    admissions = {a.workload_id: a for a in Admission.objects.select_for_update().filter(
        workload__in=stuck, ended_at__isnull=True)}
    closed, events = [], []
    code = f"STUCK_{state.upper()}"
    for w in stuck:
        adm = admissions.get(w.pk)
        if adm is not None:
            adm.ended_at, adm.end_reason, adm.forced = now, EndReason.RECLAIMED_STUCK, adm.borrowed
            closed.append(adm)
        stayed = (now - w.state_changed_at).total_seconds()
        outcome = "back in the queue" if to == S.PENDING else "failed"
        message = (f"stuck in {state} for {_human(stayed)}, more than the {_human(limit_s)} "
                   f"limit (ALLOT_{setting.upper()}): "
                   + ("capacity reclaimed, " if adm is not None else "") + outcome)
        events.append(event_new(w, EventType.RECLAIMED, at=now, code=code, message=message,
                                payload={"state": state, "stayed_s": round(stayed, 1),
                                         "limit_s": limit_s}))
        events.append(workload_transition(
            w, to, at=now, event_type=EventType.REQUEUED if to == S.PENDING else EventType.FAILED,
            code=code, message=message))
        w.preempt_deadline = None
        w.reason_code, w.reason_message = code, message
        logger.error("workload %s (%s): %s", w.pk, w.name, message)
        report.reclaimed.append(w.pk)
        (report.requeued if to == S.PENDING else report.failed).append(w.pk)
    bulk_set(Admission, closed, ["ended_at", "end_reason", "forced"])
    bulk_set(Workload, stuck, ["state", "state_changed_at", "finished_at", "preempt_deadline",
                               "reason_code", "reason_message"])
    WorkloadEvent.objects.bulk_create(events)
    dispatched = [a.pk for a in closed if a.dispatched_at is not None]
    if dispatched:
        from scheduling import tasks

        transaction.on_commit(lambda: tasks.backend_delete_many.delay(dispatched))
