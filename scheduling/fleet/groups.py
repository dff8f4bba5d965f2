"""The replica groups of a LeaderWorkerSet adopted from a cluster end with its object: when the
user deletes the object (`kubectl delete lws vllm`), the sync finds a dispatched group's object
gone (or a group's dispatch is refused: `job_gone`), and every open group of it (pending ones
too: their pods went with it) is cancelled, its quota released, with the reason on its
timeline. Called under the scheduling lock, in its transaction (scheduling/fleet/sync.py,
scheduling/fleet/dispatch.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from core import db
from scheduling import outbox
from scheduling.backends.naming import LABEL_GANG_OF, LABEL_OBJECT, LABEL_PINNED_CLUSTER
from scheduling.extensions import events_written
from scheduling.models import (
    OPEN_STATES,
    Admission,
    Cluster,
    EndReason,
    EventType,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.transitions import workload_transition


def end_deleted_groups(cluster: Cluster, gone: Iterable[int], now: datetime) -> list[int]:
    """Cancel every open group of the adopted objects of which the groups `gone` are (their
    object is no longer on `cluster`); the ids cancelled."""
    wholes: set[tuple[int, str]] = set()
    for queue_id, labels in Workload.objects.filter(pk__in=list(gone)).values_list(
            "queue_id", "labels"):
        labels = labels or {}
        if LABEL_OBJECT in labels and LABEL_GANG_OF in labels:
            wholes.add((queue_id, str(labels[LABEL_OBJECT])))
    if not wholes:
        return []
    events: list[WorkloadEvent] = []
    messages = []
    ended: list[int] = []
    for queue_id, name in sorted(wholes):
        groups = Workload.objects.select_for_update().filter(
            queue_id=queue_id, state__in=OPEN_STATES, labels__contains={
                LABEL_OBJECT: name, LABEL_GANG_OF: name,
                LABEL_PINNED_CLUSTER: cluster.name}).order_by("pk")
        for w in groups:
            events.append(workload_transition(
                w, WorkloadState.CANCELLED, at=now, event_type=EventType.CANCELLED,
                message=f"its LeaderWorkerSet {name} was deleted from {cluster.name}: every "
                        "group of it ends"))
            w.preempt_deadline = None
            w.nomination = None
            w.save(update_fields=["state", "state_changed_at", "finished_at",
                                  "preempt_deadline", "nomination"])
            ended.append(w.pk)
            for a in Admission.objects.select_for_update().filter(
                    workload=w, ended_at__isnull=True):
                a.ended_at, a.end_reason = now, EndReason.CANCELLED
                a.save(update_fields=["ended_at", "end_reason"])
                if a.dispatched_at is not None:
                    messages.append(outbox.message_delete(
                        admission_id=a.pk, cluster_id=a.cluster_id, at=now))
    db.insert_rows(WorkloadEvent, events)
    events_written(events)
    outbox.messages_write(messages)
    return ended
