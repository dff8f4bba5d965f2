"""Cancellation: who may stop a workload, and stopping it (its quota released at once, its
nodes once the cluster confirms the delete)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from quotas.models import TeamRole
from scheduling import enqueue, outbox
from scheduling.extensions import events_written
from scheduling.locks import workload_writer
from scheduling.models import (
    OPEN_STATES,
    EndReason,
    EventType,
    Workload,
    WorkloadState,
)
from scheduling.transitions import (
    admission_close,
    workload_transition,
)


def user_may_manage(user: Any, workload: Workload) -> bool:
    """The owner, a lead of the workload's team, or an admin may cancel it."""
    if user.is_staff or user.is_superuser or workload.owner_id == user.pk:
        return True
    return workload.team is not None and workload.team.memberships.filter(
        user=user, role=TeamRole.LEAD).exists()


@transaction.atomic
def workload_cancel(*, user: Any, workload: Workload, now: datetime | None = None) -> Workload:
    """Cancel a workload that has not ended; its quota is released at once, its nodes once
    the cluster confirms the delete of its objects (an outbox row written with the cancel).

    It wins over a cycle in flight without waiting for it (`workload_writer`): the cycle
    drops a decision about a workload whose state moved since its snapshot. Its time is read
    once the row is locked, so a cancel that waited for a cycle's writes to this row comes
    after what that cycle wrote (an admission it ends would otherwise end before it began).
    """
    with workload_writer():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        now = now or timezone.now()
        if not user_may_manage(user, workload):
            raise PermissionDenied("only the owner, a lead of its team or an admin may cancel "
                                   f"workload {workload.name}")
        if workload.state not in OPEN_STATES:
            raise ValidationError(f"workload {workload.name} is already {workload.state}: "
                                  "nothing to cancel")
        was = workload.state
        event = workload_transition(
            workload, WorkloadState.CANCELLED, at=now, event_type=EventType.CANCELLED,
            actor=user, message=f"cancelled by {user.get_username()} (was {was})")
        workload.preempt_deadline = None
        workload.nomination = None  # what is held for it is freed by the next cycle
        workload.save(update_fields=["state", "state_changed_at", "finished_at",
                                     "preempt_deadline", "nomination"])
        event.save()
        # Listeners (the portal's notifications) hear of it once the cancel commits: an
        # owner whose workload a lead or an admin cancelled is told who and when.
        events_written([event])
        admission = admission_close(workload=workload, at=now, reason=EndReason.CANCELLED)
        if admission is not None:
            outbox.messages_write([outbox.message_delete(
                admission_id=admission.pk, cluster_id=admission.cluster_id, at=now)])
    transaction.on_commit(enqueue.cycle_nudge)
    return workload
