"""Scaling a running workload of a scalable kind (Deployment, StatefulSet) by its replicas.

A scale-up is a new admission of the added pods: a pending workload of its own (`<name>-scale-
<k>`, labelled `allot.io/scale-of` with the running one's id, pinned to its cluster, of its
flavor), which waits in the queue with its reasons while its pods wait gated on the cluster;
once admitted it is merged into the running workload instead of being dispatched (its pods
and nodes join the running admission, the backend lifts the gate from that many more pods) and
it ends `finished`. A scale-down releases the removed pods' quota at once: waiting scale-ups
are shrunk first (newest first), then the running admission.

The admission is resized by ending it and opening one of the new size from now (both in the
same transaction; the ended one is marked cleaned, its object being the new one's), so
metering bills each size for its own time. Which pods a scale-down removed is the cluster's
choice: the admission drops the last of its nodes.

The callers hold the scheduling lock: `workload_scaled` (the sync sees a new replica count,
or the API scales), `scale_ups_merge` (the dispatch pass meets an admitted scale-up).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core import db
from scheduling import enqueue, kinds
from scheduling.backends import registry
from scheduling.backends.base import BackendError, ScalableObjects, WorkloadRef
from scheduling.backends.naming import LABEL_OBJECT, LABEL_PINNED_CLUSTER, LABEL_SCALE_OF
from scheduling.kinds.base import get
from scheduling.kinds.base import replicas as count_of
from scheduling.locks import scheduling_lock
from scheduling.models import (
    Admission,
    Cluster,
    EndReason,
    EventType,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.request.validation import MAX_NAME, gpus_shown
from scheduling.transitions import event_new, workload_transition

S = WorkloadState


@dataclass(frozen=True)
class AdmittedPods:
    """What the cluster must now be told: `count` pods of the object at `ref` are admitted."""

    ref: WorkloadRef
    count: int


def scalable(kind_key: str) -> bool:
    """Whether workloads of this kind (`apiVersion/Kind`) scale by their replicas."""
    kind = kinds.kind_named(kind_key) if kind_key else None
    return bool(kind is not None and kind.scalable)


def object_ref(w: Workload, namespace: str) -> WorkloadRef:
    """The reference to a scalable workload's object (its one pod set)."""
    return WorkloadRef.for_workload(
        namespace=namespace, workload_id=w.pk, pod_set_indexes=[0], kind=w.kind,
        object_name=(w.labels or {}).get(LABEL_OBJECT, ""))


def _namespace(w: Workload) -> str:
    return w.queue.namespace or w.queue.path.replace("/", "-")


def _recount(ps: PodSet, count: int) -> PodSet:
    """The pod set with another count, as a new row: the cycle's cache of what does not
    change after submission keys a workload's pod sets by their newest id (workers/rows.py),
    as an update of a pending workload replaces them."""
    fields = {f.attname: getattr(ps, f.attname) for f in PodSet._meta.concrete_fields
              if not f.primary_key}
    ps.delete()
    return PodSet.objects.create(**{**fields, "count": count})


def _resize(adm: Admission, ps: PodSet, count: int, now: datetime, *,
            more_nodes: list[Any] | None = None, more_cards: list[Any] | None = None
            ) -> Admission:
    """End `adm` and open the same admission with `count` pods of `ps` from now: the first
    `count` of its nodes (and cards), then `more_nodes`."""
    more_nodes, more_cards = more_nodes or [], more_cards or []
    nodes = [*adm.nodes[:count], *more_nodes][:count]
    cards: list[Any] = []
    if isinstance(adm.cards, list) and len(adm.cards) == len(adm.nodes) and len(
            more_cards) == len(more_nodes):
        cards = [*adm.cards[:count], *more_cards][:count]
    adm.ended_at, adm.end_reason, adm.cleaned_at = now, EndReason.FINISHED, now
    adm.save(update_fields=["ended_at", "end_reason", "cleaned_at"])
    return Admission.objects.create(
        workload_id=adm.workload_id, cluster_id=adm.cluster_id, flavor_id=adm.flavor_id,
        nodes=nodes, cards=cards, borrowed=adm.borrowed, gpus=count * ps.gpus,
        cpu=count * ps.cpu, memory_gib=count * ps.memory_gib, reserved_at=now,
        dispatched_at=now, running_at=now)


def workload_scaled(*, workload_id: int, cluster: Cluster, replicas: int,
                    now: datetime, actor: Any = None) -> AdmittedPods | None:
    """A running scalable workload's object asks `replicas` pods now: queue a scale-up of
    the added pods, or release the removed pods' quota at once. Returns the admitted count to
    tell the cluster when it changed (a scale-down), else None."""
    w = (Workload.objects.select_for_update().select_related("queue", "priority_class")
         .filter(pk=workload_id).first())
    if w is None or w.state != S.RUNNING or not scalable(w.kind):
        return None
    ps = PodSet.objects.select_for_update().filter(workload=w).order_by("index").first()
    adm = Admission.objects.select_for_update().filter(workload=w, ended_at__isnull=True).first()
    if ps is None or adm is None or adm.cluster_id != cluster.pk:
        return None
    waiting = list(Workload.objects.select_for_update().filter(
        state=S.PENDING, labels__contains={LABEL_SCALE_OF: str(w.pk)}).order_by("-pk"))
    their_sets = {p.workload_id: p for p in PodSet.objects.select_for_update().filter(
        workload__in=waiting)}
    asked = ps.count + sum(their_sets[c.pk].count for c in waiting if c.pk in their_sets)
    if replicas == asked or replicas < 0:
        return None
    events: list[WorkloadEvent] = []
    out = None
    if isinstance(w.manifest, dict) and isinstance(w.manifest.get("spec"), dict):
        # The object's count, kept: a dispatch elsewhere (after a preemption) makes it again.
        w.manifest["spec"]["replicas"] = replicas
        w.save(update_fields=["manifest"])
    if replicas > asked:
        events += _scale_up(w, ps, adm, cluster, replicas - asked, now, actor)
    else:
        surplus = asked - replicas
        for c in waiting:  # the waiting scale-ups first, newest first
            cps = their_sets.get(c.pk)
            if cps is None or surplus == 0:
                continue
            if cps.count <= surplus:
                surplus -= cps.count
                c.finished_at = now
                events.append(workload_transition(
                    c, S.CANCELLED, at=now, event_type=EventType.CANCELLED, actor=actor,
                    message=f"scaled down on {cluster.name} to {replicas} pods before it was "
                    "admitted"))
                c.save(update_fields=["state", "state_changed_at", "finished_at"])
            else:
                cps = _recount(cps, cps.count - surplus)
                events.append(event_new(c, EventType.UPDATED, at=now, actor=actor,
                                        message=f"scaled down on {cluster.name}: "
                                        f"{cps.count + surplus} -> {cps.count} pods wait"))
                surplus = 0
        if surplus:
            old = ps.count
            ps = _recount(ps, old - surplus)
            _resize(adm, ps, ps.count, now)
            released = gpus_shown(surplus * ps.gpus)
            events.append(event_new(
                w, EventType.UPDATED, at=now, actor=actor,
                message=f"scaled down on {cluster.name}: {old} -> {ps.count} pods; the quota "
                f"of {surplus} pods ({released} GPUs) released",
                payload={"scaled": {"from": old, "to": ps.count}}))
            out = AdmittedPods(object_ref(w, _namespace(w)), ps.count)
    db.insert_rows(WorkloadEvent, events)
    return out


def _scale_up(w: Workload, ps: PodSet, adm: Admission, cluster: Cluster, grow: int,
              now: datetime, actor: Any) -> list[WorkloadEvent]:
    """Queue the added pods as a workload of their own (pending, pinned to the cluster)."""
    n = Workload.objects.filter(labels__contains={LABEL_SCALE_OF: str(w.pk)}).count() + 1
    suffix = f"-scale-{n}"
    manifest = copy.deepcopy(w.manifest) if isinstance(w.manifest, Mapping) else {}
    if isinstance(manifest.get("spec"), dict):
        manifest["spec"]["replicas"] = grow
    labels = {k: v for k, v in (w.labels or {}).items() if k != LABEL_OBJECT}
    up = Workload.objects.create(
        name=f"{w.name[:MAX_NAME - len(suffix)]}{suffix}", queue=w.queue, team=w.team,
        owner=w.owner, state=S.PENDING, priority_class=w.priority_class,
        preemptible=w.preemptible, checkpoint=w.checkpoint, strategy=w.strategy,
        termination_grace_s=w.termination_grace_s, topology=w.topology, kind=w.kind,
        manifest=manifest, labels={**labels, LABEL_SCALE_OF: str(w.pk),
                                   LABEL_PINNED_CLUSTER: cluster.name},
        submitted_at=now, state_changed_at=now)
    PodSet.objects.create(
        workload=up, index=0, count=grow, flavors=[adm.flavor.name], gpus=ps.gpus, cpu=ps.cpu,
        memory_gib=ps.memory_gib, gpu_memory_gib=ps.gpu_memory_gib, resources=ps.resources)
    gpus = gpus_shown(grow * ps.gpus)
    return [
        event_new(up, EventType.SUBMITTED, at=now, actor=actor,
                  message=f"scale-up of {w.name} (#{w.pk}) on {cluster.name}: {grow} more pods "
                  f"({gpus} GPUs) wait gated for their admission",
                  payload={"priority_class": w.priority_class.name, "scale_of": w.pk}),
        event_new(w, EventType.UPDATED, at=now, actor=actor,
                  message=f"scaled up on {cluster.name}: {ps.count} -> {ps.count + grow} pods; "
                  f"the {grow} added pods wait as {up.name} (#{up.pk})",
                  payload={"scaled": {"from": ps.count, "to": ps.count + grow},
                           "scale_up": up.pk}),
    ]


def scale_ups_merge(*, cluster: Cluster, admission_ids: list[int], now: datetime
                    ) -> list[AdmittedPods]:
    """Merge admitted scale-ups into their running workloads (instead of a dispatch): their
    pods and nodes join its admission, and they end `finished`; one whose workload no longer
    runs there is cancelled. Returns the admitted counts to tell the cluster."""
    out = []
    events: list[WorkloadEvent] = []
    for adm in Admission.objects.select_for_update().filter(
            pk__in=admission_ids, ended_at__isnull=True).order_by("pk"):
        up = Workload.objects.select_for_update().get(pk=adm.workload_id)
        parent_id = str((up.labels or {}).get(LABEL_SCALE_OF, ""))
        if up.state != S.RESERVED or not parent_id.isdigit():
            continue
        w = (Workload.objects.select_for_update().select_related("queue")
             .filter(pk=int(parent_id)).first())
        wadm = None if w is None else Admission.objects.select_for_update().filter(
            workload=w, ended_at__isnull=True).first()
        ps = None if w is None else PodSet.objects.select_for_update().filter(
            workload=w).order_by("index").first()
        ups = PodSet.objects.filter(workload=up).order_by("index").first()
        adm.dispatched_at = adm.running_at = adm.ended_at = adm.cleaned_at = now
        if (w is None or w.state != S.RUNNING or wadm is None or ps is None or ups is None
                or wadm.cluster_id != cluster.pk):
            adm.dispatched_at = adm.running_at = None
            adm.end_reason = EndReason.CANCELLED
            adm.save(update_fields=["dispatched_at", "running_at", "ended_at", "end_reason",
                                    "cleaned_at"])
            up.finished_at = now
            events.append(workload_transition(
                up, S.CANCELLED, at=now, event_type=EventType.CANCELLED,
                message=f"workload #{parent_id} no longer runs on {cluster.name}: its "
                "scale-up is dropped"))
            up.save(update_fields=["state", "state_changed_at", "finished_at"])
            continue
        adm.end_reason = EndReason.FINISHED
        adm.save(update_fields=["dispatched_at", "running_at", "ended_at", "end_reason",
                                "cleaned_at"])
        old = ps.count
        ps = _recount(ps, old + ups.count)
        _resize(wadm, ps, ps.count, now, more_nodes=list(adm.nodes),
                more_cards=list(adm.cards or []))
        up.finished_at = now
        events.append(workload_transition(
            up, S.FINISHED, at=now, event_type=EventType.FINISHED,
            message=f"admitted on {cluster.name}: its {ups.count} pods joined {w.name} "
            f"(#{w.pk})"))
        up.save(update_fields=["state", "state_changed_at", "finished_at"])
        events.append(event_new(
            w, EventType.UPDATED, at=now,
            message=f"scale-up admitted on {cluster.name}: {old} -> {ps.count} pods "
            f"({gpus_shown(ps.count * ps.gpus)} GPUs)",
            payload={"scaled": {"from": old, "to": ps.count}, "scale_up": up.pk}))
        out.append(AdmittedPods(object_ref(w, _namespace(w)), ps.count))
    db.insert_rows(WorkloadEvent, events)
    return out


def workload_scale(*, user: Any, workload: Workload, manifest: Any,
                   now: datetime | None = None) -> Workload:
    """Scale a running scalable workload through Allot (an update of its manifest that
    changes only `spec.replicas`): the object on its cluster is scaled first, then the added
    pods are queued or the removed pods' quota released, as when the cluster is scaled
    (either order gives the same result: the sync compares the object with what is admitted
    and waiting). ValidationError names the field when anything else changed."""
    w = workload
    kind = kinds.kind_named(w.kind)
    if kind is None or not isinstance(manifest, Mapping):
        raise ValidationError({"manifest": ["expected an object (a Kubernetes manifest)"]})
    try:
        replicas = count_of(kind.kind, get(manifest, "spec.replicas"), "spec.replicas")
    except kinds.ManifestError as exc:
        raise ValidationError({f"manifest.{exc.path}": [f"{exc.kind}: {exc.problem}"]}) from exc
    before, after = copy.deepcopy(dict(w.manifest)), copy.deepcopy(dict(manifest))
    old = (before.get("spec") or {}).pop("replicas", 1)
    (after.get("spec") or {}).pop("replicas", None)
    if before != after:
        raise ValidationError({"manifest": [
            f"{kind.kind} {w.name} is running: only spec.replicas may change ({old} now); "
            "other changes need a resubmission once it has ended"]})
    adm = Admission.objects.select_related("cluster").filter(
        workload=w, ended_at__isnull=True).first()
    if adm is None:
        raise ValidationError({"state": [f"workload {w.name} has no admission to scale"]})
    backend = registry.get_backend(adm.cluster)
    ref = object_ref(w, _namespace(w))
    if isinstance(backend, ScalableObjects):
        try:
            backend.scale_object(ref, replicas)
        except BackendError as exc:
            raise ValidationError({"manifest.spec.replicas": [
                f"cluster {adm.cluster.name} did not take the scale to {replicas}: {exc}; "
                "nothing changed"]}) from exc
    with transaction.atomic(), scheduling_lock(wait=True):
        at = now or timezone.now()
        told = workload_scaled(workload_id=w.pk, cluster=adm.cluster, replicas=replicas,
                               now=at, actor=user)
        Workload.objects.filter(pk=w.pk).update(manifest=dict(manifest))
    if told is not None and isinstance(backend, ScalableObjects):
        try:
            backend.admit_pods(told.ref, told.count)
        except BackendError:  # the next status read lifts the gate from what is admitted
            pass
    transaction.on_commit(enqueue.cycle_nudge)
    return Workload.objects.get(pk=w.pk)
