"""Phase two of dispatch: create the admitted workloads' Jobs (suspended) and start them.

A local refusal (DispatchRefused) releases the reservation, lowers the cluster's health for a
while and records both steps; the next cycle places the workload elsewhere. Clusters whose
state lives in this database are dispatched inside the cycle's transaction
(`dispatch_in_cycle`); others after it commits (`cluster_dispatch`).

Backend calls happen outside the scheduling lock (they may be slow); the state changes they
cause are written under it, after re-reading the rows, so a concurrent cycle never sees half.
The other fleet stages (sync, watch, teardown, maintenance) follow the same rule.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Mod
from django.utils import timezone

from core import db
from scheduling import enqueue
from scheduling.backends import registry
from scheduling.backends.base import (
    BackendError,
    BatchDispatch,
    DispatchOutcome,
    DispatchRefused,
    PodSetSpec,
    RefusalReason,
    ScalableObjects,
    WorkloadSpec,
)
from scheduling.backends.naming import (
    LABEL_OBJECT,
    LABEL_SCALE_OF,
    LABEL_SIM_GPU_UTIL,
    adopted_group,
)
from scheduling.fleet import groups, scaling
from scheduling.fleet.refs import (
    penalty,
    penalty_s,
)
from scheduling.locks import (
    DISPATCH_SHARDS,
    cluster_locks,
    scheduling_lock,
)
from scheduling.models import (
    Admission,
    Cluster,
    EndReason,
    EventCode,
    EventType,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.transitions import (
    event_new,
    workload_transition,
    workloads_move,
)

logger = logging.getLogger(__name__)
S = WorkloadState


@dataclass
class DispatchReport:
    """What one dispatch pass did."""

    started: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    errors_ids: set[int] = field(default_factory=set)
    skipped: bool = False  # another pass held the cluster


# The columns a dispatch pass reads, in one query (no model instances on the hot path).
DISPATCH_FIELDS = (
    "pk", "workload_id", "nodes", "cards", "flavor__name", "flavor__node_selector",
    "flavor__gpu_memory_gib", "cluster__name",
    "workload__name", "workload__queue__path", "workload__queue__namespace",
    "workload__image", "workload__command", "workload__priority_class__name",
    "workload__termination_grace_s", "workload__duration_hint_s", "workload__progress_s",
    "workload__kind", "workload__manifest", "workload__labels",
)
# The columns of a pod set it reads (`_spec_of`).
POD_SET_FIELDS = ("index", "count", "gpus", "cpu", "memory_gib", "gpu_memory_gib", "resources")


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


def _decimal_or_none(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _spec_of(row: dict[str, Any], pod_sets: list[dict[str, Any]]) -> WorkloadSpec:
    """The backend's view of one admission row (see DISPATCH_FIELDS)."""
    sets, k = [], 0
    for ps in pod_sets:
        sets.append(PodSetSpec(
            index=ps["index"], count=ps["count"], flavor=row["flavor__name"], gpus=ps["gpus"],
            cpu=ps["cpu"], memory_gib=ps["memory_gib"], resources=dict(ps["resources"] or {}),
            node_selector=dict(row["flavor__node_selector"] or {}),
            nodes=tuple(row["nodes"][k:k + ps["count"]]),
            gpu_memory_gib=_decimal_or_none(ps.get("gpu_memory_gib")),
            card_memory_gib=_decimal_or_none(row["flavor__gpu_memory_gib"]),
            cards=tuple((row["cards"] or [])[k:k + ps["count"]])))
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
        labels={k: v for k, v in (row.get("workload__labels") or {}).items()
                if k == LABEL_SIM_GPU_UTIL},
        kind=row.get("workload__kind") or "",
        manifest=row.get("workload__manifest") or {},
        object_name=(row.get("workload__labels") or {}).get(LABEL_OBJECT, ""),
        group=adopted_group(row.get("workload__labels")))


def _dispatch_batch(cluster: Cluster, rows: list[dict[str, Any]], now: datetime | None,
                    report: DispatchReport) -> None:
    backend = registry.get_backend(cluster)
    ups = [r for r in rows if LABEL_SCALE_OF in (r.get("workload__labels") or {})]
    if ups:
        _merge_scale_ups(cluster, backend, ups, now, report)
        rows = [r for r in rows if r not in ups]
        if not rows:
            return
    pod_sets: dict[int, list[Any]] = {}
    for ps in PodSet.objects.filter(workload_id__in=db.in_array(
            [r["workload_id"] for r in rows], "bigint")).order_by(
            "workload_id", "index").values("workload_id", *POD_SET_FIELDS):
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
    _dispatched(cluster, started, now or timezone.now(), report)
    if refused:
        with scheduling_lock(wait=True):
            at = now or timezone.now()  # read once the lock is held: after what a cycle wrote
            for row, refusal in refused:
                if _refused(row, refusal, at):
                    report.refused.append(row["workload_id"])
            # A group of an adopted LeaderWorkerSet whose object the user deleted: every
            # group of it ends (its object will not come back).
            gone = [row["workload_id"] for row, refusal in refused
                    if refusal.reason == RefusalReason.JOB_GONE
                    and adopted_group(row.get("workload__labels")) is not None]
            if gone:
                groups.end_deleted_groups(cluster, gone, at)
        enqueue.cycle_nudge()


def _merge_scale_ups(cluster: Cluster, backend: Any, rows: list[dict[str, Any]],
                     now: datetime | None, report: DispatchReport) -> None:
    """Admitted scale-ups create nothing: they join their running workload (scaling.py) and
    the cluster lifts the gate from that many more of its pods."""
    with scheduling_lock(wait=True):
        told = scaling.scale_ups_merge(cluster=cluster, admission_ids=[r["pk"] for r in rows],
                                       now=now or timezone.now())
    report.started.extend(r["workload_id"] for r in rows)
    if not isinstance(backend, ScalableObjects):
        return
    for pods in told:
        try:
            backend.admit_pods(pods.ref, pods.count)
        except BackendError as exc:  # the next status read lifts what is admitted
            logger.warning("cluster %s: admit pods failed: %s", cluster.name, exc)


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
    if not settings.ALLOT_WORKERS["dispatch_in_cycle"]:
        return
    by_cluster: dict[int, list[Admission]] = {}
    for adm in admissions:
        by_cluster.setdefault(adm.cluster_id, []).append(adm)
    clusters = {c.pk: c for c in parts.clusters.values()}
    for cluster_id, all_adms in by_cluster.items():
        cluster = clusters[cluster_id]
        backend = registry.get_backend(cluster)
        if not (isinstance(backend, BatchDispatch)
                and getattr(backend, "joins_transaction", False)):
            continue
        # Scale-ups are merged by the pass after commit (it reads their saved admissions).
        adms = [a for a in all_adms if LABEL_SCALE_OF not in (
            parts.workloads[str(a.workload_id)].labels or {})]
        if not adms:
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
                "workload_id": w.pk, "nodes": adm.nodes, "cards": adm.cards,
                "flavor__name": flavor,
                "flavor__node_selector": parts.node_selectors.get(flavor, {}),
                "flavor__gpu_memory_gib": parts.card_memory.get(flavor),
                "workload__name": w.name, "workload__queue__path": row["queue__path"],
                "workload__queue__namespace": row["queue__namespace"],
                "workload__image": w.image, "workload__command": w.command,
                "workload__priority_class__name": parts.priority_names.get(
                    w.priority_class_id, ""),
                "workload__termination_grace_s": w.termination_grace_s,
                "workload__duration_hint_s": w.duration_hint_s,
                "workload__progress_s": w.progress_s,
                "workload__kind": w.kind, "workload__manifest": w.manifest,
                "workload__labels": w.labels,
            }, parts.pod_sets.get(w.pk, [])))
        try:
            outcomes = backend.dispatch_many(specs, replace=previous)
        except BackendError as exc:
            logger.warning("cluster %s: dispatch in the cycle failed, left to the dispatch "
                           "pass: %s", cluster.name, exc)
            continue
        handled, running = 0, []
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
                running.append(w.pk)
            handled += 1
        # The database refuses pending -> running (its transitions trigger): these rows pass
        # through reserved, as the workloads did here; the cycle then writes them running.
        workloads_move(running, S.PENDING, S.RESERVED, at=now)
        if handled == len(all_adms):
            report.dispatch_clusters.discard(cluster_id)


def _refused_in_cycle(cluster: Cluster, adm: Admission, w: Workload, refusal: DispatchRefused,
                      now: datetime, events: list[WorkloadEvent]) -> None:
    """`_refused` for an admission the cycle has not saved yet (the cycle saves it)."""
    events.extend(_release(cluster, adm, w, refusal, now))


def _release(cluster: Cluster, adm: Admission, w: Workload, refusal: DispatchRefused,
             now: datetime) -> list[WorkloadEvent]:
    """End the refused admission, lower the cluster's health for a while and requeue the
    workload, in memory (the caller saves the admission, the workload and the returned
    events); the cluster's penalty is written at once."""
    adm.ended_at, adm.end_reason, adm.cleaned_at = now, EndReason.REFUSED, now
    until = now + timedelta(seconds=penalty_s())
    Cluster.objects.filter(pk=cluster.pk).update(health_penalty=penalty(),
                                                 health_penalty_until=until)
    cluster.health_penalty, cluster.health_penalty_until = penalty(), until
    message = (f"cluster {cluster.name} refused the dispatch ({refusal.reason}: "
               f"{refusal.message}); reservation released, cluster health "
               f"{cluster.health:g} -> {cluster.effective_health(now):g} for "
               f"{penalty_s():.0f}s; will be placed again")
    events = [
        event_new(w, EventType.REFUSED, at=now, code=EventCode.DISPATCH_REFUSED, message=message,
                  payload={"cluster": cluster.name, "reason": str(refusal.reason)}),
        workload_transition(w, S.PENDING, at=now, event_type=EventType.REQUEUED,
                            message=f"back in the queue after the refusal by {cluster.name}"),
    ]
    w.reason_code, w.reason_message = EventCode.DISPATCH_REFUSED, message
    logger.warning("workload %s refused by %s: %s", w.pk, cluster.name, refusal)
    return events


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

    No scheduling lock: both writes are conditional UPDATEs (the admission still open and not
    yet dispatched; the workload still reserved) returning the rows they changed, so a cycle
    that ended the admission or preempted the workload meanwhile wins, and the dispatch never
    waits behind a cycle.
    """
    if not started:
        return
    pks = [r["pk"] for r, _ in started]
    running_pks = [r["pk"] for r, running in started if running]
    at = Admission._meta.get_field("dispatched_at").get_db_prep_save(now, connection)
    where, params = db.any_of('"id"', pks)
    sets, set_params = '"dispatched_at" = %s', [at]
    if running_pks:
        when, when_params = db.any_of('"id"', running_pks)
        sets += f', "running_at" = CASE WHEN {when} THEN %s ELSE "running_at" END'
        set_params += [*when_params, at]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{Admission._meta.db_table}" SET {sets} WHERE {where} AND '
            '"ended_at" IS NULL AND "dispatched_at" IS NULL RETURNING "id"',
            [*set_params, *params])
        recorded = {row[0] for row in cursor.fetchall()}
        ran = workloads_move([r["workload_id"] for r, running in started
                              if running and r["pk"] in recorded],
                             S.RESERVED, S.RUNNING, at=now)
        _dispatch_events(cluster, [(r, r["workload_id"] in ran) for r, _ in started
                                   if r["pk"] in recorded], now, report)


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
    db.insert_rows(WorkloadEvent, events)
    report.started.extend(r["workload_id"] for r, _ in done)


def _refused(row: dict[str, Any], refusal: DispatchRefused, now: datetime) -> bool:
    """Release the reservation and lower the cluster's health for a while (both recorded).

    Runs under the scheduling lock; False when the admission had already ended."""
    w = Workload.objects.select_for_update().get(pk=row["workload_id"])
    fresh = Admission.objects.select_for_update().get(pk=row["pk"])
    if fresh.ended_at is not None or w.state != S.RESERVED:
        return False
    events = _release(Cluster.objects.get(pk=fresh.cluster_id), fresh, w, refusal, now)
    fresh.save(update_fields=["ended_at", "end_reason", "cleaned_at"])
    w.save(update_fields=["state", "state_changed_at", "reason_code", "reason_message"])
    WorkloadEvent.objects.bulk_create(events)
    return True
