"""Following `kubectl scale` of a LeaderWorkerSet adopted from a cluster (kubectl apply with the
queue label): the object is the user's, each replica group a workload of its own, listed on the
object (`allot.io/group-workloads`). The full sync lists the cluster's adopted objects (one
call) and compares each one's `spec.replicas` with the groups it lists:

- **more replicas**: each added group becomes a workload of the same queue, owner and priority
  (`<name>-<index>`, pinned to the cluster and the object, labelled with its group index), with
  the pod sets of the object's other groups; its pods, made gated by the controller, wait for
  its admission as any group's;
- **fewer**: the removed groups' workloads end (a running one `finished`, a waiting one
  `cancelled`), their quota released at once; the controller has deleted their pods;
- **zero, then more**: with no open group left, the workload the object is labelled with
  (its first group) says whose it is;
- **the object gone** while every group waits (no group dispatched for the sync to notice):
  every group ends, as when a dispatched group finds it gone (scheduling/fleet/groups.py).

The object's list of groups is written after the database commits; a write that fails is
written again by the next sync (the groups it adds are found by their index, not made twice).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from core import db
from scheduling import enqueue, kinds, outbox
from scheduling.backends.base import AdoptedGroups, AdoptedObject, BackendError
from scheduling.backends.naming import (
    LABEL_GANG,
    LABEL_GANG_OF,
    LABEL_OBJECT,
    LABEL_PINNED_CLUSTER,
)
from scheduling.extensions import events_written
from scheduling.fleet import groups
from scheduling.locks import scheduling_lock
from scheduling.models import (
    OPEN_STATES,
    Cluster,
    EventType,
    OutboxMessage,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.request.validation import MAX_NAME, gpus_shown
from scheduling.transitions import event_new

logger = logging.getLogger(__name__)
S = WorkloadState
# The webhook records the groups before the API server stores the object: an object not found
# is taken as deleted only once its groups are this old.
GONE_GRACE = timedelta(seconds=60)


@dataclass
class GroupsFollowed:
    """What one pass saw: groups added, ended by a scale-down, ended with their object."""

    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Object:
    queue_id: int
    namespace: str
    name: str
    kind: str


def adopted_groups_follow(*, cluster: Cluster, backend: object,
                          now: datetime | None = None) -> GroupsFollowed:
    """Compare each adopted LeaderWorkerSet on `cluster` (one list call per kind) with its
    groups and follow a scale or a deletion (see the module)."""
    out = GroupsFollowed()
    if not isinstance(backend, AdoptedGroups):
        return out
    for kind in kinds.KINDS.values():
        if kind.gangs_fn is not None:
            _follow_kind(cluster, backend, kind.key, now, out)
    if out.added or out.removed or out.gone:
        enqueue.cycle_nudge()
    return out


def _follow_kind(cluster: Cluster, backend: AdoptedGroups, kind: str, now: datetime | None,
                 out: GroupsFollowed) -> None:
    try:
        listed = {(o.namespace, o.name): o for o in backend.adopted_objects(kind)}
    except BackendError as exc:
        logger.warning("cluster %s: listing adopted %s objects failed: %s", cluster.name,
                       kind, exc)
        return
    waiting: dict[_Object, list[Mapping[str, Any]]] = {}  # open groups, by their object
    for row in Workload.objects.filter(state__in=OPEN_STATES, kind=kind,
                                       labels__has_key=LABEL_GANG).values(
            "pk", "labels", "queue_id", "queue__namespace", "queue__path", "submitted_at"):
        labels = row["labels"] or {}
        if (labels.get(LABEL_PINNED_CLUSTER) != cluster.name or LABEL_OBJECT not in labels
                or LABEL_GANG_OF not in labels):
            continue
        namespace = row["queue__namespace"] or row["queue__path"].replace("/", "-")
        known = _Object(row["queue_id"], namespace, str(labels[LABEL_OBJECT]), kind)
        waiting.setdefault(known, []).append(row)
    at = now or timezone.now()
    gone = [r["pk"] for obj, rows in waiting.items() if (obj.namespace, obj.name) not in listed
            and all(r["submitted_at"] <= at - GONE_GRACE for r in rows) for r in rows]
    if gone:
        with scheduling_lock(wait=True):
            out.gone += groups.end_deleted_groups(cluster, gone, now or timezone.now())
    by_name = {(o.namespace, o.name): (o, rows) for o, rows in waiting.items()}
    for where, seen in sorted(listed.items()):
        mine = by_name.get(where)
        obj: _Object | None = mine[0] if mine else None
        rows: list[Mapping[str, Any]] = mine[1] if mine else []
        ids = list(seen.workload_ids)
        beyond = [r["pk"] for r in rows if _index(r["labels"]) >= seen.replicas]
        if (seen.replicas == len(ids) and not beyond
                and {r["pk"] for r in rows} <= set(ids)):
            continue
        if obj is None:  # no open group (scaled to zero): its first group says whose it is
            obj = _owned(cluster, kind, seen)
            if obj is None:
                continue
        with scheduling_lock(wait=True):
            ids_now, fresh, added, removed = _scaled(cluster, obj, seen.replicas, ids,
                                                     now or timezone.now())
        out.added += added
        out.removed += removed
        if ids_now != ids or fresh:
            try:
                backend.set_adopted_groups(kind, obj.namespace, obj.name, ids_now, fresh)
            except BackendError as exc:  # the next sync writes it again
                logger.warning("cluster %s: listing the groups of %s/%s failed: %s",
                               cluster.name, obj.namespace, obj.name, exc)


def _owned(cluster: Cluster, kind: str, seen: AdoptedObject) -> _Object | None:
    """The object of `seen` as Allot knows it, from the workload it was labelled with (its
    first group), if that is one of its groups on this cluster."""
    w = Workload.objects.filter(pk=seen.first_workload_id or 0, kind=kind).select_related(
        "queue").first()
    labels = (w.labels or {}) if w is not None else {}
    if (w is None or labels.get(LABEL_OBJECT) != seen.name
            or labels.get(LABEL_PINNED_CLUSTER) != cluster.name):
        return None
    namespace = w.queue.namespace or w.queue.path.replace("/", "-")
    return _Object(w.queue_id, namespace, seen.name, kind) if namespace == seen.namespace \
        else None


def _scaled(cluster: Cluster, obj: _Object, replicas: int, listed: list[int], now: datetime
            ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Under the scheduling lock: add or end groups so the object's `replicas` are its
    groups. Returns (the groups' ids to list, the new group indexes, added, ended)."""
    mine = list(Workload.objects.select_for_update().filter(
        queue_id=obj.queue_id, kind=obj.kind, labels__contains={
            LABEL_OBJECT: obj.name, LABEL_GANG_OF: obj.name,
            LABEL_PINNED_CLUSTER: cluster.name}).order_by("pk"))
    events: list[WorkloadEvent] = []
    messages: list[OutboxMessage] = []
    removed: list[int] = []
    before = len(listed)
    for w in mine:
        index = _index(w.labels)
        if index < replicas or w.state not in OPEN_STATES:
            continue
        events.append(groups.end_group(
            w, finished=w.state in (S.RUNNING, S.PREEMPTING), now=now, messages=messages,
            message=f"scaled down on {cluster.name}: {before} -> {replicas} groups of "
                    f"{obj.name}; group {index} removed, its quota released"))
        removed.append(w.pk)
    ids = list(listed[:replicas])
    fresh: list[int] = []
    added: list[int] = []
    waiting = {_index(w.labels): w for w in mine
               if w.state in OPEN_STATES and w.pk not in listed}
    model = max(mine, key=lambda w: w.pk) if mine else None
    for index in range(len(ids), replicas):
        found = waiting.get(index)
        if found is None:
            if model is None:
                break
            found = _new_group(model, obj, index, cluster, before, replicas, now, events)
            added.append(found.pk)
        ids.append(found.pk)
        fresh.append(index)
    db.insert_rows(WorkloadEvent, events)
    events_written(events)
    outbox.messages_write(messages)
    return ids, fresh, added, removed


def _index(labels: Mapping[str, Any] | None) -> int:
    """A group workload's index on its object (-1: none)."""
    raw = str((labels or {}).get(LABEL_GANG, ""))
    return int(raw) if raw.isdigit() else -1


def _free_name(queue_id: int, base: str) -> str:
    """`base`, or `base-2`, `base-3`, ...: a name no open workload of the queue holds."""
    taken = set(Workload.objects.filter(queue_id=queue_id, state__in=OPEN_STATES,
                                        name__startswith=base[:MAX_NAME - 4])
                .values_list("name", flat=True))
    name, n = base[:MAX_NAME], 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = f"{base[:MAX_NAME - len(suffix)]}{suffix}"
    return name


def _new_group(model: Workload, obj: _Object, index: int, cluster: Cluster, before: int,
               replicas: int, now: datetime, events: list[WorkloadEvent]) -> Workload:
    """A workload for group `index` of the object, as its other groups (`model`) are."""
    w = Workload.objects.create(
        name=_free_name(model.queue_id, f"{obj.name}-{index}"), queue_id=model.queue_id,
        team_id=model.team_id, owner_id=model.owner_id, state=S.PENDING,
        priority_class=model.priority_class, preemptible=model.preemptible,
        checkpoint=model.checkpoint, strategy=model.strategy, dataset=model.dataset,
        duration_hint_s=model.duration_hint_s, termination_grace_s=model.termination_grace_s,
        topology=model.topology, kind=model.kind, manifest=model.manifest,
        labels={**(model.labels or {}), LABEL_GANG: str(index)},
        submitted_at=now, state_changed_at=now)
    sets = list(PodSet.objects.filter(workload_id=model.pk).order_by("index"))
    for ps in sets:
        fields = {f.attname: getattr(ps, f.attname) for f in PodSet._meta.concrete_fields
                  if not f.primary_key and f.attname != "workload_id"}
        PodSet.objects.create(workload=w, **fields)
    gpus = gpus_shown(sum(ps.count * ps.gpus for ps in sets))
    events.append(event_new(
        w, EventType.SUBMITTED, at=now,
        message=f"group {index} of {obj.name}, added by a scale on {cluster.name} "
        f"({before} -> {replicas} groups): {sum(ps.count for ps in sets)} pods ({gpus} GPUs) "
        "wait gated for their admission",
        payload={"priority_class": model.priority_class.name, "group_of": obj.name}))
    return w
