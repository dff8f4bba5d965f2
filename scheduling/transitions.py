"""Workload state changes: the transitions table and the one way through it.

Every state change goes through `workload_transition` (one workload, in memory: the caller
saves it and the event row it returns in one transaction, the cycle in bulk) or
`workloads_move` (many workloads in one conditional UPDATE, for the workers' hot paths). Both
refuse a move the table does not allow, and so does the database: a trigger on the workload
table refuses any UPDATE of a state to a pair not in the table (IntegrityError), whatever
wrote it. Its pairs are a copy made by a migration: a change of ALLOWED_TRANSITIONS needs a
migration creating the trigger again (tests/integration/scheduling/test_transitions.py says
so).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from django.db import connection
from django.db.models import Field

from core import db
from scheduling.models import (
    TERMINAL_STATES,
    Admission,
    Workload,
    WorkloadEvent,
    WorkloadState,
)

S = WorkloadState
# The columns every state change writes (the workers write them in bulk).
STATE_FIELDS = ["state", "state_changed_at", "finished_at"]


ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.RESERVED, S.REJECTED, S.CANCELLED, S.FAILED}),
    # reserved -> pending: refused dispatch, pods-ready timeout, reclaimed while stuck.
    S.RESERVED: frozenset({S.RUNNING, S.PENDING, S.PREEMPTING, S.CANCELLED, S.FINISHED,
                           S.FAILED}),
    # running -> pending: the backend lost the pods and the workload may retry.
    S.RUNNING: frozenset({S.FINISHED, S.FAILED, S.PREEMPTING, S.CANCELLED, S.PENDING}),
    # preempting -> finished: it completed inside its grace period.
    S.PREEMPTING: frozenset({S.PENDING, S.CANCELLED, S.FINISHED, S.FAILED}),
    S.FINISHED: frozenset(),
    S.CANCELLED: frozenset(),
    S.REJECTED: frozenset(),
    S.FAILED: frozenset(),
}


class TransitionError(ValueError):
    """A state change the transitions table does not allow."""


def workload_transition(
    workload: Workload,
    to: str,
    *,
    at: datetime,
    event_type: str,
    actor: Any = None,
    code: str = "",
    message: str = "",
    payload: Mapping[str, Any] | None = None,
) -> WorkloadEvent:
    """Move `workload` to state `to` (in memory) and return its unsaved event row.

    The caller saves both in one transaction (the cycle does it in bulk).
    """
    if to not in ALLOWED_TRANSITIONS[workload.state]:
        raise TransitionError(f"workload {workload.pk} ({workload.name}): {workload.state} -> "
                              f"{to} is not an allowed transition")
    workload.state = to
    workload.state_changed_at = at
    if to in TERMINAL_STATES:
        workload.finished_at = at
    return WorkloadEvent(
        workload=workload, at=at, type=event_type, actor=actor, code=code, message=message,
        payload=dict(payload or {}),
    )


def event_new(
    workload: Workload, event_type: str, *, at: datetime, code: str = "", message: str = "",
    actor: Any = None, payload: Mapping[str, Any] | None = None,
) -> WorkloadEvent:
    """An unsaved event row that is not a state change (a reason, a dispatch step)."""
    return WorkloadEvent(workload=workload, at=at, type=event_type, actor=actor, code=code,
                         message=message, payload=dict(payload or {}))


def admission_close(*, workload: Workload, at: datetime, reason: str) -> Admission | None:
    """End the workload's open admission interval (None if it has none)."""
    admission = Admission.objects.filter(workload=workload, ended_at__isnull=True).first()
    if admission is None:
        return None
    admission.ended_at = at
    admission.end_reason = reason
    admission.save(update_fields=["ended_at", "end_reason"])
    return admission


def workloads_move(ids: list[int], frm: str, to: str, *, at: datetime) -> set[int]:
    """Move the workloads `ids` that are still in state `frm` to `to` in one conditional
    UPDATE, and return the ids it moved: a workload whose state changed meanwhile (a cycle
    preempted it, a user cancelled it) is left as it is, without waiting for a lock."""
    if to not in ALLOWED_TRANSITIONS[frm]:
        raise TransitionError(f"{frm} -> {to} is not an allowed transition")
    if not ids:
        return set()
    values: dict[str, Any] = {"state": to, "state_changed_at": at}
    if to in TERMINAL_STATES:
        values["finished_at"] = at
    meta = Workload._meta
    fields = {c: cast(Field, meta.get_field(c)) for c in values}
    where, params = db.any_of('"id"', ids)
    sets = ", ".join(f'"{fields[c].column}" = %s' for c in values)
    prepared = [fields[c].get_db_prep_save(v, connection) for c, v in values.items()]
    with connection.cursor() as cursor:
        cursor.execute(f'UPDATE "{meta.db_table}" SET {sets} WHERE {where} AND "state" = %s '
                       'RETURNING "id"', [*prepared, *params, frm])
        return {row[0] for row in cursor.fetchall()}
