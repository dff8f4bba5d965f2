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
    OutboxMessage,
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
    messages: list[OutboxMessage] = []
    ended: list[int] = []
    for queue_id, name in sorted(wholes):
        groups = Workload.objects.select_for_update().filter(
            queue_id=queue_id, state__in=OPEN_STATES, labels__contains={
                LABEL_OBJECT: name, LABEL_GANG_OF: name,
                LABEL_PINNED_CLUSTER: cluster.name}).order_by("pk")
        for w in groups:
            events.append(end_group(
                w, finished=False, now=now, messages=messages,
                message=f"its LeaderWorkerSet {name} was deleted from {cluster.name}: every "
                        "group of it ends"))
            ended.append(w.pk)
    db.insert_rows(WorkloadEvent, events)
    events_written(events)
    outbox.messages_write(messages)
    return ended


def end_group(w: Workload, *, finished: bool, message: str, now: datetime,
              messages: list[OutboxMessage]) -> WorkloadEvent:
    """End one open group workload (under the scheduling lock): `finished` (it ran: its run
    time is counted) or cancelled. Its open admissions end with it, their quota released, and
    a delete of each dispatched one goes into `messages`; returns its event (not written)."""
    event = workload_transition(
        w, WorkloadState.FINISHED if finished else WorkloadState.CANCELLED, at=now,
        event_type=EventType.FINISHED if finished else EventType.CANCELLED, message=message)
    w.preempt_deadline = None
    w.nomination = None
    for a in Admission.objects.select_for_update().filter(workload=w, ended_at__isnull=True):
        if finished and a.running_at is not None:
            w.progress_s += (now - a.running_at).total_seconds()
        a.ended_at = now
        a.end_reason = EndReason.FINISHED if finished else EndReason.CANCELLED
        a.save(update_fields=["ended_at", "end_reason"])
        if a.dispatched_at is not None:
            messages.append(outbox.message_delete(admission_id=a.pk, cluster_id=a.cluster_id,
                                                  at=now))
    w.save(update_fields=["state", "state_changed_at", "finished_at", "preempt_deadline",
                          "nomination", "progress_s"])
    return event
