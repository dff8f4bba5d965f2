"""The outbox of cluster calls: deletes, suspends (with the event posted beside them) and
dispatch passes, written as rows in the transaction of the state change that needs them.

A broker that is down when the change commits cannot lose them: the workers deliver every
row that is due (`scheduling/fleet/delivery.py`, on a beat and nudged after each commit) until
the cluster confirms it, retrying with a capped exponential backoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from core import db
from scheduling import enqueue
from scheduling.models import OutboxKind, OutboxMessage


def message_delete(*, admission_id: int, cluster_id: int, at: datetime) -> OutboxMessage:
    """An unsaved row: delete an ended admission's objects on its cluster."""
    return OutboxMessage(kind=OutboxKind.DELETE, admission_id=admission_id,
                         cluster_id=cluster_id, created_at=at, next_attempt_at=at)


def message_suspend(*, admission_id: int, cluster_id: int, at: datetime,
                    reason: str) -> OutboxMessage:
    """An unsaved row: suspend a preempted admission's objects and post `reason` beside them
    (a Warning event named Preempted)."""
    return OutboxMessage(kind=OutboxKind.SUSPEND, admission_id=admission_id,
                         cluster_id=cluster_id, payload={"reason": reason[:1000]},
                         created_at=at, next_attempt_at=at)


def message_event(*, workload_id: int, cluster_id: int, at: datetime, type: str,
                  reason: str, message: str) -> OutboxMessage:
    """An unsaved row: post `reason` as an Event (`type` Normal or Warning) on the object a
    workload adopted from its cluster, so `kubectl describe` says why it waits."""
    return OutboxMessage(kind=OutboxKind.EVENT, cluster_id=cluster_id,
                         payload={"workload_id": int(workload_id), "type": type,
                                  "reason": reason[:128], "message": message[:1000]},
                         created_at=at, next_attempt_at=at)


def message_dispatch(*, cluster_id: int, at: datetime) -> OutboxMessage:
    """An unsaved row: a dispatch pass on the cluster (its reserved, undispatched work)."""
    return OutboxMessage(kind=OutboxKind.DISPATCH, cluster_id=cluster_id, created_at=at,
                         next_attempt_at=at)


def messages_write(messages: Sequence[OutboxMessage]) -> None:
    """Insert the rows in the caller's transaction (one statement), and nudge their delivery
    after it commits (a nudge that fails is only logged: the beat delivers them)."""
    if not messages:
        return
    db.insert_rows(OutboxMessage, messages)
    transaction.on_commit(enqueue.outbox_nudge)
