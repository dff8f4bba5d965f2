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
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Mod
from django.utils import timezone

from scheduling.backends.base import (
    BackendError,
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
from scheduling.cycle import LOCK_KEY, bulk_set, scheduling_lock
from scheduling.models import (
    Admission,
    Cluster,
    EndReason,
    EventType,
    Node,
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
    if connection.vendor != "postgresql":
        yield True
        return
    key = DISPATCH_LOCK_BASE + int(cluster_id) * 64 + int(shard)
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_lock(%s), true", [key])
        else:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        got = bool(cursor.fetchone()[-1])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def cluster_dispatch(*, cluster_id: int, now: datetime | None = None,
                     batch: int = 200, shard: int | None = None) -> DispatchReport:
    """Create and start every reserved, undispatched workload of a cluster (or of one shard);
    shards another pass holds are left to it (`skipped`)."""
    report = DispatchReport()
    first = os.getpid() % DISPATCH_SHARDS  # parallel passes start on different shards
    shards = [shard] if shard is not None else [
        (first + k) % DISPATCH_SHARDS for k in range(DISPATCH_SHARDS)]
    for part in shards:
        with cluster_lock(cluster_id, part) as got:
            if not got:
                report.skipped = True
                continue
            while True:
                ids = list(
                    Admission.objects.filter(cluster_id=cluster_id, ended_at__isnull=True,
                                             dispatched_at__isnull=True,
                                             workload__state=S.RESERVED)
                    .annotate(shard=Mod("workload_id", DISPATCH_SHARDS)).filter(shard=part)
                    .exclude(workload_id__in=report.errors_ids)
                    .order_by("pk").values_list("pk", flat=True)[:batch])
                if not ids:
                    break
                _dispatch_batch(_admissions(pk__in=ids), now, report)
                if len(ids) < batch:
                    break
    return report


def _dispatch_batch(pending: list[Admission], now: datetime | None,
                    report: DispatchReport) -> None:
    cluster = pending[0].cluster
    backend = get_backend(cluster)
    started: list[Admission] = []
    refused: list[tuple[Admission, DispatchRefused]] = []
    previous = set(Admission.objects.filter(
        workload_id__in=[a.workload_id for a in pending], cluster_id=cluster.pk,
        cleaned_at__isnull=True, ended_at__isnull=False).values_list("workload_id", flat=True))
    # One database transaction around the batch: a database-backed (simulated) cluster then
    # commits once per batch instead of once per call; a remote cluster is unaffected.
    with transaction.atomic():
        _create_and_start(backend, cluster, pending, previous, started, refused, report)
    now = now or timezone.now()
    with scheduling_lock(wait=True):
        _dispatched(started, now, report)
        for adm, refusal in refused:
            if _refused(adm, refusal, now):
                report.refused.append(adm.workload_id)
    if refused:
        _nudge()


def _create_and_start(backend: Any, cluster: Cluster, pending: list[Admission],
                      previous: set[int], started: list[Admission],
                      refused: list[tuple[Admission, DispatchRefused]],
                      report: DispatchReport) -> None:
    for adm in pending:
        spec = workload_spec(adm)
        try:
            if adm.workload_id in previous:
                # A previous interval's Jobs carry the same names: remove them first, or the
                # create would find them and resume the old placement.
                backend.delete_workload(spec.ref)
            ref = backend.create_workload(spec)
            backend.start_workload(ref)
        except DispatchRefused as refusal:
            refused.append((adm, refusal))
            try:
                backend.delete_workload(spec.ref)
            except BackendError:
                logger.warning("cluster %s: could not clean up refused workload %s",
                               cluster.name, adm.workload_id, exc_info=True)
            continue
        except BackendError as exc:
            # Retryable: the task retries; the pods-ready timeout bounds how long.
            report.errors.append(f"{adm.workload_id}: {exc}")
            report.errors_ids.add(adm.workload_id)
            logger.warning("cluster %s: dispatch of workload %s failed: %s", cluster.name,
                           adm.workload_id, exc)
            continue
        started.append(adm)


def _dispatched(admissions: list[Admission], now: datetime, report: DispatchReport) -> None:
    """Record the started ones whose admission is still open (under the scheduling lock)."""
    if not admissions:
        return
    still_open = set(Admission.objects.filter(
        pk__in=[a.pk for a in admissions], ended_at__isnull=True,
        dispatched_at__isnull=True).values_list("pk", flat=True))
    done = [a for a in admissions if a.pk in still_open]
    for a in done:
        a.dispatched_at = now
    bulk_set(Admission, done, ["dispatched_at"])
    WorkloadEvent.objects.bulk_create([
        WorkloadEvent(workload_id=a.workload_id, at=now, type=EventType.DISPATCHED,
                      message=f"created on {a.cluster.name} and started "
                      f"({len(a.nodes)} pods on {len(set(a.nodes))} nodes)",
                      payload={"cluster": a.cluster.name})
        for a in done])
    report.started.extend(a.workload_id for a in done)


def _refused(adm: Admission, refusal: DispatchRefused, now: datetime) -> bool:
    """Release the reservation and lower the cluster's health for a while (both recorded).

    Runs under the scheduling lock; False when the admission had already ended."""
    w = Workload.objects.select_for_update().get(pk=adm.workload_id)
    fresh = Admission.objects.select_for_update().get(pk=adm.pk)
    if fresh.ended_at is not None or w.state != S.RESERVED:
        return False
    fresh.ended_at, fresh.end_reason = now, EndReason.REFUSED
    fresh.cleaned_at = now
    fresh.save(update_fields=["ended_at", "end_reason", "cleaned_at"])
    cluster = Cluster.objects.select_for_update().get(pk=adm.cluster_id)
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


def cluster_sync(*, cluster_id: int, now: datetime | None = None,
                 nodes: bool = True, nudge: bool = True) -> SyncReport:
    """Follow pods of the cluster's dispatched workloads; refresh its node inventory."""
    report = SyncReport()
    cluster = Cluster.objects.get(pk=cluster_id)
    backend = get_backend(cluster)
    if nodes:
        report.nodes_changed = _sync_nodes(cluster, backend)
    adms = _admissions(cluster_id=cluster_id, ended_at__isnull=True,
                       dispatched_at__isnull=False,
                       workload__state__in=[S.RESERVED, S.RUNNING, S.PREEMPTING])
    if not adms:
        return report
    try:
        statuses = backend.workload_statuses([workload_ref(adm) for adm in adms])
    except BackendError as exc:
        logger.warning("cluster %s: workload status failed: %s", cluster.name, exc)
        return report
    observed = [(adm, status.phase, status.message) for adm, status in zip(adms, statuses,
                                                                            strict=True)]
    if not observed:
        return report
    now = now or timezone.now()
    with scheduling_lock(wait=True):
        _apply_status(observed, now, report)
    if nudge and (report.finished or report.failed or report.lost):
        _nudge()
    return report


def _apply_status(observed: list[tuple[Admission, Phase, str]], now: datetime,
                  report: SyncReport) -> None:
    ids = [adm.workload_id for adm, _, _ in observed]
    fresh = {w.pk: w for w in Workload.objects.select_for_update().filter(pk__in=ids)
             .order_by("pk")}
    open_adm = {a.pk: a for a in Admission.objects.select_for_update().filter(
        pk__in=[adm.pk for adm, _, _ in observed], ended_at__isnull=True)}
    events: list[WorkloadEvent] = []
    changed_w: dict[int, Workload] = {}
    changed_a: dict[int, Admission] = {}
    for adm, phase, message in observed:
        w, a = fresh.get(adm.workload_id), open_adm.get(adm.pk)
        if w is None or a is None:
            continue
        if phase == Phase.RUNNING and w.state == S.RESERVED:
            a.running_at = now
            changed_a[a.pk] = a
            events.append(workload_transition(
                w, S.RUNNING, at=now, event_type=EventType.RUNNING,
                message=f"all {len(a.nodes)} pods running on {adm.cluster.name}"))
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
                message=f"all pods succeeded on {adm.cluster.name}"))
            changed_w[w.pk] = w
            report.finished.append(w.pk)
        elif phase == Phase.FAILED and w.state in (S.RESERVED, S.RUNNING, S.PREEMPTING):
            a.ended_at, a.end_reason = now, EndReason.FAILED
            changed_a[a.pk] = a
            w.preempt_deadline = None
            events.append(workload_transition(
                w, S.FAILED, at=now, event_type=EventType.FAILED,
                message=f"failed on {adm.cluster.name}: {message or 'a pod failed'}"))
            changed_w[w.pk] = w
            report.failed.append(w.pk)
        elif phase == Phase.MISSING and w.state in (S.RUNNING, S.RESERVED):
            # Its Jobs vanished (deleted by hand, cluster rebuilt): back to the queue.
            a.ended_at, a.end_reason, a.forced = now, EndReason.FAILED, a.borrowed
            changed_a[a.pk] = a
            events.append(workload_transition(
                w, S.PENDING, at=now, event_type=EventType.REQUEUED,
                message=f"its Jobs disappeared from {adm.cluster.name}; back in the queue"))
            changed_w[w.pk] = w
            report.lost.append(w.pk)
    if changed_a:
        bulk_set(Admission, list(changed_a.values()),
                 ["running_at", "ended_at", "end_reason", "forced"])
    if changed_w:
        bulk_set(Workload, list(changed_w.values()),
                 ["state", "state_changed_at", "finished_at", "progress_s", "preempt_deadline"])
    if events:
        WorkloadEvent.objects.bulk_create(events)


def _sync_nodes(cluster: Cluster, backend: object) -> int:
    """Update readiness and allocatable resources of known nodes (new nodes are added)."""
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
    reclaimed: list[int] = field(default_factory=list)


def stuck_limit_s(state: str) -> float:
    """How long a workload may stay in `state` before it is reclaimed as stuck."""
    timeout = float(getattr(settings, "ALLOT_ENGINE", {}).get("pods_ready_timeout_s", 300.0))
    limits = {
        # The engine releases reserved work at the pods-ready timeout; twice that means the
        # release itself did not happen (e.g. the cycle kept failing on this workload).
        S.RESERVED: 2 * timeout + 60,
        # Requeue happens at the end of grace; past this, the victim did not yield.
        S.PREEMPTING: _setting("preempting_stuck_s", 600.0),
    }
    return limits.get(state, float("inf"))


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

    for state in (S.RESERVED, S.PREEMPTING):
        limit = now - timedelta(seconds=stuck_limit_s(state))
        candidates = list(Workload.objects.filter(state=state, state_changed_at__lt=limit)
                          .values_list("pk", flat=True))
        if not candidates:
            continue
        with scheduling_lock(wait=True):
            stuck = list(Workload.objects.select_for_update().filter(
                pk__in=candidates, state=state, state_changed_at__lt=limit).order_by("pk"))
            events = []
            for w in stuck:
                adm = Admission.objects.filter(workload=w, ended_at__isnull=True).first()
                if adm is not None:
                    adm.ended_at, adm.end_reason, adm.forced = (
                        now, EndReason.RECLAIMED_STUCK, adm.borrowed)
                    adm.save(update_fields=["ended_at", "end_reason", "forced"])
                was = w.state
                message = (f"stuck in {was} for more than {stuck_limit_s(was):.0f}s: capacity "
                           "reclaimed, back in the queue")
                events.append(workload_transition(w, S.PENDING, at=now,
                                                  event_type=EventType.RECLAIMED,
                                                  message=message))
                w.preempt_deadline = None
                w.save(update_fields=["state", "state_changed_at", "preempt_deadline"])
                logger.error("workload %s (%s): %s", w.pk, w.name, message)
                report.reclaimed.append(w.pk)
            WorkloadEvent.objects.bulk_create(events)
    if report.reclaimed:
        _nudge()
    return report
