"""Workloads above the approval thresholds wait for a lead or an admin.

Thresholds are settings (`ALLOT_APPROVAL_MAX_GPUS`, default 32; `ALLOT_APPROVAL_MAX_HOURS`,
default 72): a request for more GPUs or a longer expected duration is held with
`needs_approval` (the cycle skips it) until approved; a denial rejects it. Each decision is a
workload event and the owner is emailed. Nobody decides their own workload, and
`ALLOT_MIN_APPROVERS` different people must approve (`portal.pages.approvers`): each earlier
approval is an `APPROVAL_GIVEN` event, the last one `APPROVED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from portal.pages import approvers
from portal.pages.access import user_scope
from scheduling import enqueue
from scheduling.models import EventCode, EventType, Workload, WorkloadEvent, WorkloadState
from scheduling.request.validation import gpus_shown
from scheduling.transitions import workload_transition


def approval_thresholds() -> tuple[int, float]:
    """(max GPUs, max hours) a workload may ask for without approval."""
    return int(settings.ALLOT_APPROVAL_MAX_GPUS), float(settings.ALLOT_APPROVAL_MAX_HOURS)


def approval_reason(submission: Mapping[str, Any]) -> str:
    """Why a submission (the API's dict) needs approval, naming the numbers; '' if it does not.

    `workloads_submit` calls it on the validated request and then sets `needs_approval`.
    """
    max_gpus, max_hours = approval_thresholds()
    gpus = sum(int(p.get("count", 1)) * Decimal(str(p.get("gpus", 0) or 0))
               for p in submission.get("pods") or [])
    parts = []
    if gpus > max_gpus:
        parts.append(f"{gpus_shown(gpus)} GPUs > {max_gpus}")
    hint = submission.get("duration_hint_s")
    if hint is not None and float(hint) / 3600 > max_hours:
        parts.append(f"expected {float(hint) / 3600:g} h > {max_hours:g} h")
    return "needs approval: " + ", ".join(parts) if parts else ""


def _check(user: Any, workload: Workload) -> Workload:
    if not user_scope(user).can_decide(workload.queue_id):
        raise PermissionDenied(f"{user.get_username()} may not decide for queue "
                               f"{workload.queue.path}: leads decide for their teams' queues")
    locked = Workload.objects.select_for_update().select_related("owner", "queue").get(
        pk=workload.pk)
    if not locked.needs_approval or locked.state != WorkloadState.PENDING:
        raise ValidationError(f"workload {locked.name} is {locked.state} and does not wait "
                              "for approval")
    approvers.refuse_own(user, locked.owner_id, f"workload {locked.name}")
    return locked


def _notify(workload: Workload, subject: str, body: str) -> None:
    """Tell the requester of the decision (bell and email, unless muted)."""
    from django.urls import reverse

    from portal.models import NotificationKind
    from portal.notifications import notify

    url = reverse("workload-detail", args=[workload.pk])
    notify(
        user_ids=[workload.owner_id], kind=NotificationKind.DECISION, subject=subject,
        body=body, url=url, workload_id=workload.pk)


@transaction.atomic
def workload_approve(*, user: Any, workload: Workload, comment: str = "",
                     now: datetime | None = None) -> Workload:
    """Let a held workload be scheduled; the approval is an event on its timeline."""
    now = now or timezone.now()
    workload = _check(user, workload)
    given, needed = approvers.approvals_state(
        workload.events.filter(code=EventCode.APPROVAL_GIVEN).values_list("actor_id", flat=True),
        user)
    approvers.badge_forget([user.pk])
    if given < needed:
        WorkloadEvent.objects.create(
            workload=workload, at=now, type=EventType.POLICY, actor=user,
            code=EventCode.APPROVAL_GIVEN,
            message=f"approved by {user.get_username()} ({given} of {needed} approvals)"
            + (f": {comment}" if comment else ""))
        return workload
    workload.needs_approval = False
    if workload.reason_code == EventCode.NEEDS_APPROVAL:
        # The next cycle gives it its scheduling reason (or admits it).
        workload.reason_code, workload.reason_message = "", ""
    workload.save(update_fields=["needs_approval", "reason_code", "reason_message"])
    WorkloadEvent.objects.create(
        workload=workload, at=now, type=EventType.POLICY, actor=user, code=EventCode.APPROVED,
        message=f"approved by {user.get_username()}" + (f": {comment}" if comment else ""),
    )
    transaction.on_commit(enqueue.cycle_nudge)
    _notify(workload, f"Workload {workload.name} approved",
            f"{workload.name} in {workload.queue.path} was approved by "
            f"{user.get_username()}. {comment}")
    return workload


@transaction.atomic
def workload_deny(*, user: Any, workload: Workload, comment: str,
                  now: datetime | None = None) -> Workload:
    """Reject a held workload with a comment saying why."""
    now = now or timezone.now()
    if not comment.strip():
        raise ValidationError({"comment": ["say why the workload is denied"]})
    workload = _check(user, workload)
    approvers.badge_forget([user.pk])
    message = f"denied by {user.get_username()}: {comment.strip()}"
    event = workload_transition(workload, WorkloadState.REJECTED, at=now,
                                event_type=EventType.REJECTED, actor=user,
                                code=EventCode.APPROVAL_DENIED, message=message)
    workload.needs_approval = False
    workload.reason_code, workload.reason_message = EventCode.APPROVAL_DENIED, message
    workload.save(update_fields=["state", "state_changed_at", "finished_at", "needs_approval",
                                 "reason_code", "reason_message"])
    event.save()
    _notify(workload, f"Workload {workload.name} denied", message)
    return workload
