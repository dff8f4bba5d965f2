"""Following workloads on their clusters by polling: pod status moves a workload from
reserved to running to finished or failed, and releases what a cluster lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from core import db
from core.history import Source, history_context
from quotas.models import Flavor
from scheduling import enqueue, extensions
from scheduling.backends import registry
from scheduling.backends.base import (
    BackendError,
    FlavorMatch,
    RunPhase,
    ScalableObjects,
    ServedKinds,
    WorkloadRef,
)
from scheduling.backends.naming import LABEL_OBJECT, LABEL_SCALE_OF, adopted_group
from scheduling.fleet import group_scaling, groups, scaling
from scheduling.locks import (
    scheduling_lock,
)
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
from scheduling.transitions import (
    workload_transition,
)

logger = logging.getLogger(__name__)
S = WorkloadState


@dataclass
class SyncReport:
    """What one sync pass saw and changed."""

    running: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    # Groups of an adopted LeaderWorkerSet whose object was deleted, and every open group of
    # it: cancelled (scheduling/fleet/groups.py).
    gone: list[int] = field(default_factory=list)
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
    backend = registry.get_backend(cluster)
    if nodes:
        report.nodes_changed = sync_nodes(cluster, backend)
    if workload_ids is not None and not workload_ids:
        return report
    if workload_ids is None:
        # An adopted LeaderWorkerSet scaled on the cluster (its new groups' pods come gated:
        # no pod of Allot's changes, so the full pass looks, not the watch).
        group_scaling.adopted_groups_follow(cluster=cluster, backend=backend, now=now)
    qs = Admission.objects.filter(cluster_id=cluster_id, ended_at__isnull=True,
                                  dispatched_at__isnull=False,
                                  workload__state__in=[S.RESERVED, S.RUNNING, S.PREEMPTING])
    if workload_ids is not None:
        qs = qs.filter(workload_id__in=list(workload_ids))
    rows = list(qs.order_by("pk").values(
        "pk", "workload_id", "workload__state", "workload__queue__path",
        "workload__queue__namespace", "workload__kind", "workload__labels"))
    if not rows:
        return report
    indexes: dict[int, list[int]] = {}
    for wid, index in PodSet.objects.filter(
            workload_id__in=[r["workload_id"] for r in rows]).order_by(
            "workload_id", "index").values_list("workload_id", "index"):
        indexes.setdefault(wid, []).append(index)
    refs = [WorkloadRef.for_workload(
        namespace=r["workload__queue__namespace"] or r["workload__queue__path"].replace("/", "-"),
        workload_id=r["workload_id"], pod_set_indexes=indexes.get(r["workload_id"], []),
        kind=r["workload__kind"],
        object_name=(r["workload__labels"] or {}).get(LABEL_OBJECT, ""),
        group=adopted_group(r["workload__labels"]))
        for r in rows]
    try:
        statuses = backend.workload_statuses(refs)
    except BackendError as exc:
        logger.warning("cluster %s: workload status failed: %s", cluster.name, exc)
        return report
    _follow_scaling(cluster, backend, rows, statuses, now)
    observed = [(r["pk"], r["workload_id"], status.phase, status.message)
                for r, status in zip(rows, statuses, strict=True)
                if _moves(r["workload__state"], status.phase)]
    if not observed:
        return report
    with scheduling_lock(wait=True):
        # The clock is read once the lock is held: what a cycle wrote while this pass waited
        # comes before the changes it records.
        at = now or timezone.now()
        _apply_status(cluster.name, observed, at, report)
        if report.gone:
            report.gone = groups.end_deleted_groups(cluster, report.gone, at)
    if nudge and (report.finished or report.failed or report.lost or report.gone):
        enqueue.cycle_nudge()
    return report


def _follow_scaling(cluster: Cluster, backend: object, rows: Sequence[Mapping[str, Any]],
                    statuses: list[Any], now: datetime | None) -> None:
    """A running scalable workload (Deployment, StatefulSet) whose object now asks another
    number of pods than admitted (or with scale-ups waiting): a scale-up queued, a scale-down's
    quota released (scheduling/fleet/scaling.py), the cluster told the admitted count."""
    asked = {}
    for r, status in zip(rows, statuses, strict=True):
        if (r["workload__state"] == S.RUNNING and scaling.scalable(r["workload__kind"])
                and status.pod_sets and status.pod_sets[0].exists):
            asked[r["workload_id"]] = status.pod_sets[0].count
    if not asked:
        return
    admitted = dict(PodSet.objects.filter(workload_id__in=list(asked), index=0)
                    .values_list("workload_id", "count"))
    waiting: dict[int, int] = {}  # pods of the scale-ups waiting, by the workload scaled
    for labels, count in PodSet.objects.filter(
            workload__state=S.PENDING, workload__labels__has_key=LABEL_SCALE_OF).values_list(
            "workload__labels", "count"):
        parent = str(labels[LABEL_SCALE_OF])
        if parent.isdigit():
            waiting[int(parent)] = waiting.get(int(parent), 0) + count
    changed = [wid for wid, n in asked.items()
               if n != admitted.get(wid, 0) + waiting.get(wid, 0)]
    if not changed:
        return
    with scheduling_lock(wait=True):
        at = now or timezone.now()
        told = [scaling.workload_scaled(workload_id=wid, cluster=cluster, replicas=asked[wid],
                                        now=at) for wid in changed]
    if isinstance(backend, ScalableObjects):
        for pods in told:
            if pods is not None:
                try:
                    backend.admit_pods(pods.ref, pods.count)
                except BackendError as exc:  # the next status read lifts what is admitted
                    logger.warning("cluster %s: admit pods failed: %s", cluster.name, exc)
    enqueue.cycle_nudge()


def _moves(state: str, phase: RunPhase) -> bool:
    """Whether a workload in `state` whose pods are in `phase` changes state."""
    if phase == RunPhase.RUNNING:
        return state == S.RESERVED
    if phase in (RunPhase.SUCCEEDED, RunPhase.FAILED):
        return state in (S.RESERVED, S.RUNNING, S.PREEMPTING)
    if phase == RunPhase.MISSING:
        return state in (S.RUNNING, S.RESERVED)
    return False


def _apply_status(cluster_name: str, observed: list[tuple[int, int, RunPhase, str]],
                  now: datetime, report: SyncReport) -> None:
    ids = [wid for _, wid, _, _ in observed]
    fresh = {w.pk: w for w in Workload.objects.select_for_update().filter(pk__in=ids)
             .only("id", "name", "state", "state_changed_at", "finished_at", "progress_s",
                   "preempt_deadline", "labels").order_by("pk")}
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
        if phase == RunPhase.RUNNING and w.state == S.RESERVED:
            a.running_at = now
            changed_a[a.pk] = a
            events.append(workload_transition(
                w, S.RUNNING, at=now, event_type=EventType.RUNNING,
                message=f"all {len(a.nodes)} pods running on {cluster_name}"))
            changed_w[w.pk] = w
            report.running.append(w.pk)
        elif phase == RunPhase.SUCCEEDED and w.state in (S.RESERVED, S.RUNNING, S.PREEMPTING):
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
        elif phase == RunPhase.FAILED and w.state in (S.RESERVED, S.RUNNING, S.PREEMPTING):
            a.ended_at, a.end_reason = now, EndReason.FAILED
            changed_a[a.pk] = a
            w.preempt_deadline = None
            events.append(workload_transition(
                w, S.FAILED, at=now, event_type=EventType.FAILED,
                message=f"failed on {cluster_name}: {message or 'a pod failed'}"))
            changed_w[w.pk] = w
            report.failed.append(w.pk)
        elif (phase == RunPhase.MISSING and w.state in (S.RUNNING, S.RESERVED)
              and adopted_group(w.labels) is not None):
            report.gone.append(w.pk)  # its user's object was deleted: all its groups end
        elif phase == RunPhase.MISSING and w.state in (S.RUNNING, S.RESERVED):
            # Its Jobs vanished (deleted by hand, cluster rebuilt): back to the queue.
            a.ended_at, a.end_reason, a.forced = now, EndReason.FAILED, a.borrowed
            changed_a[a.pk] = a
            events.append(workload_transition(
                w, S.PENDING, at=now, event_type=EventType.REQUEUED,
                message=f"its Jobs disappeared from {cluster_name}; back in the queue"))
            changed_w[w.pk] = w
            report.lost.append(w.pk)
    if changed_a:
        db.bulk_set(Admission, list(changed_a.values()),
                 ["running_at", "ended_at", "end_reason", "forced"])
    if changed_w:
        db.bulk_set(Workload, list(changed_w.values()),
                 ["state", "state_changed_at", "finished_at", "progress_s", "preempt_deadline"])
    db.insert_rows(WorkloadEvent, events)
    extensions.events_written(events)


def _sync_kinds(cluster: Cluster, backend: object) -> None:
    """Record the workload kinds the cluster serves (the fleet page shows them)."""
    if not isinstance(backend, ServedKinds):
        return
    try:
        served = backend.served_kinds()
    except BackendError as exc:
        logger.warning("cluster %s: API discovery failed: %s", cluster.name, exc)
        return
    if served != list(cluster.kinds or []):
        Cluster.objects.filter(pk=cluster.pk).update(kinds=served)
        cluster.kinds = served


@history_context(Source.SYNC)
def sync_nodes(cluster: Cluster, backend: object) -> int:
    """Update readiness and allocatable resources of known nodes (new nodes are added).

    A new node is saved (a `sync` row in its history); readiness and capacity of known nodes
    change by UPDATE, with no history: they flap with every look at the cluster.
    """
    flavors = {f.name: f for f in Flavor.objects.all()}
    matches = [FlavorMatch(name=f.name, node_selector=dict(f.node_selector or {}),
                           interconnect_label=f.interconnect_label) for f in flavors.values()]
    try:
        infos = backend.list_nodes(matches)  # type: ignore[attr-defined]
    except BackendError as exc:
        logger.warning("cluster %s: node inventory failed: %s", cluster.name, exc)
        return 0
    _sync_kinds(cluster, backend)
    known = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    changed = 0
    for info in infos:
        node = known.get(info.name)
        if info.flavor is None or info.flavor not in flavors:
            continue
        values = {"gpus": info.gpus, "cpu": info.cpu, "memory_gib": info.memory_gib,
                  "ready": info.ready, "rack": info.rack or (node.rack if node else ""),
                  "resources": dict(info.resources)}
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
