"""Capacity request services: submit, comment, approve, deny, cancel, apply, revert.

Every change of state goes through `_move`, checked against TRANSITIONS, and writes an event.
Applying or reverting changes a QuotaEntry only when the whole tree still passes
`quotas.tree_rules.validate_tree` with the change; otherwise nothing is saved and the
ValidationError names the queue, the key and the numbers.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from core.history import Source, history_context
from portal.pages import approvers
from portal.pages.access import user_scope
from quotas import selectors as tree_selectors
from quotas import services as tree_services
from quotas.capacity.models import (
    CapacityRequest,
    CapacityRequestEvent,
    CapacityRequestState,
    decimal_or_none,
)
from quotas.models import Flavor, Queue, QuotaEntry
from quotas.tree_rules import QueueSpec, QuotaSpec, fmt

S = CapacityRequestState
TRANSITIONS: dict[str, set[str]] = {
    S.SUBMITTED: {S.APPROVED, S.ACTIVE, S.DENIED, S.CANCELLED},
    S.APPROVED: {S.ACTIVE, S.CANCELLED},
    S.ACTIVE: {S.REVERTED},
    S.DENIED: set(),
    S.CANCELLED: set(),
    S.REVERTED: set(),
}


def _event(
    request: CapacityRequest, *, type: str, actor: Any = None, message: str = "",
    payload: dict[str, Any] | None = None, at: dt.datetime | None = None,
) -> CapacityRequestEvent:
    return CapacityRequestEvent.objects.create(
        request=request, at=at or timezone.now(), type=type, actor=actor, message=message,
        payload=payload or {},
    )


def _move(request: CapacityRequest, to: str) -> None:
    if to not in TRANSITIONS[request.state]:
        raise ValidationError(
            {"state": [f"request #{request.pk} is {request.state}; it cannot become {to}"]}
        )
    request.state = to


def _lock(request: CapacityRequest) -> CapacityRequest:
    """The tree lock (the one `quotas.services` takes, first, so lock order is the same
    everywhere: two approvals on siblings must not each pass V2 alone), then the request row."""
    tree_services.lock_tree()
    return CapacityRequest.objects.select_for_update().get(pk=request.pk)


def _entry_values(entry: QuotaEntry | None) -> dict[str, Any]:
    if entry is None:
        return {"exists": False, "min": None, "max": None, "lendable": None}
    return {
        "exists": True,
        "min": str(entry.min),
        "max": None if entry.max is None else str(entry.max),
        "lendable": None if entry.lendable is None else str(entry.lendable),
    }


def tree_check_entry(
    *, queue: Queue, flavor: Flavor, resource: str, values: dict[str, Any] | None
) -> tuple[list[str], list[str]]:
    """Errors and warnings the tree would have with this entry set (values None: removed)."""
    specs = tree_selectors.tree_specs()
    spec = specs[queue.path]
    quota = dict(spec.quota)
    key = (flavor.name, resource)
    if values is None:
        quota.pop(key, None)
    else:
        quota[key] = QuotaSpec(
            values["min"] if values["min"] is not None else Decimal(0),
            values["max"], values["lendable"],
        )
    specs[queue.path] = QueueSpec(path=spec.path, parent=spec.parent, quota=quota)
    try:
        report = tree_services.tree_check(specs.values())
    except ValidationError as exc:
        return list(exc.messages), []
    return [], [p.message for p in report.warnings]


def _set_entry(request: CapacityRequest, values: dict[str, Any] | None, *, actor: Any,
               reason: str) -> list[str]:
    """Set (or remove) the request's entry through the tree service; return the warnings.

    `quotas.services` validates the whole tree with the change and saves nothing on an error.
    The entry's history records it as `capacity_request`, by `actor` (None: the beat, on no
    one's behalf), with `reason` naming the request.
    """
    with history_context(Source.CAPACITY_REQUEST, user=actor, reason=reason):
        if values is None:
            change = tree_services.quota_set(
                queue=request.queue, flavor=request.flavor.name, resource=request.resource,
                clear=True,
            )
        else:
            change = tree_services.quota_set(
                queue=request.queue, flavor=request.flavor.name, resource=request.resource,
                min=values["min"], max=values["max"], lendable=values["lendable"],
            )
    return list(change.warnings)


def _requested_values(request: CapacityRequest, entry: QuotaEntry | None) -> dict[str, Any]:
    current = _entry_values(entry)
    return {
        "min": request.min if request.min is not None else decimal_or_none(current["min"]),
        "max": request.max if request.max is not None else decimal_or_none(current["max"]),
        "lendable": decimal_or_none(current["lendable"]),
    }


def _entry(request: CapacityRequest) -> QuotaEntry | None:
    return QuotaEntry.objects.filter(
        queue=request.queue, flavor=request.flavor, resource=request.resource
    ).first()


def _notify(request: CapacityRequest, subject: str, body: str) -> None:
    """Tell the requester (bell and email, unless they muted decisions)."""
    from django.urls import reverse

    from portal.models import NotificationKind
    from portal.notifications import notify

    url = reverse("capacity-request-detail", args=[request.pk])
    notify(
        user_ids=[request.requested_by_id], kind=NotificationKind.DECISION, subject=subject,
        body=body, url=url)


@transaction.atomic
def capacity_request_submit(
    *, user: User, queue: Queue, flavor: Flavor, resource: str, justification: str,
    min: Decimal | None = None, max: Decimal | None = None,
    starts_at: dt.datetime | None = None, ends_at: dt.datetime | None = None,
) -> CapacityRequest:
    """File a request to change a queue's min and/or max for one key over a period (either
    may be left out, None: unchanged; not both)."""
    now = timezone.now()
    starts_at = starts_at or now
    errors: dict[str, list[str]] = {}
    if not user_scope(user).can_see_queue(queue.pk):
        errors["queue"] = [f"no queue {queue.path!r} among your teams' queues"]
    if min is None and max is None:
        errors["min"] = ["give a new min, a new max, or both"]
    for name, value in (("min", min), ("max", max)):
        if value is not None and value < 0:
            errors[name] = [f"{name} {fmt(value)} < 0"]
    if min is not None and max is not None and min > max:
        errors["max"] = [f"max {fmt(max)} < min {fmt(min)}"]
    if ends_at is not None and ends_at <= starts_at:
        errors["ends_at"] = [f"ends_at {ends_at:%Y-%m-%d %H:%M} is not after starts_at "
                             f"{starts_at:%Y-%m-%d %H:%M}"]
    elif ends_at is not None and ends_at <= now:
        errors["ends_at"] = ["ends_at is in the past"]
    if not justification.strip():
        errors["justification"] = ["say why the capacity is needed"]
    if errors:
        raise ValidationError(errors)
    request = CapacityRequest.objects.create(
        queue=queue, flavor=flavor, resource=resource, min=min, max=max,
        justification=justification.strip(), starts_at=starts_at, ends_at=ends_at,
        requested_by=user,
    )
    current = _entry_values(_entry(request))
    change = (f"{queue.path} {request.key}: min {_change(current['min'], min)}, "
              f"max {_change(current['max'], max)}")
    _event(request, type="submitted", actor=user, at=now, message=change,
           payload={"current": current})
    transaction.on_commit(lambda: approvers.notify_approvers(
        queue_id=queue.pk, requester_id=user.pk,
        subject=f"Approval needed: capacity request #{request.pk} for {queue.path}",
        body=f"{user.get_username()} asks: {change}.\nWhy: {request.justification}\n"
        f"Decide at {reverse('capacity-request-detail', args=[request.pk])}"))
    return request


def _change(old: Any, new: Decimal | None) -> str:
    old_text = "unset" if old is None else fmt(Decimal(str(old)))
    if new is None:
        return f"{old_text} (unchanged)"
    return f"{old_text} -> {fmt(new)}"


def _check_decider(user: User, request: CapacityRequest) -> None:
    scope = user_scope(user)
    if not scope.can_decide(request.queue_id):
        raise PermissionDenied(
            f"{user.get_username()} may not decide requests for {request.queue.path}: "
            "leads decide for their teams' queues, platform admins for all"
        )


@transaction.atomic
def capacity_request_approve(
    *, user: User, request: CapacityRequest, comment: str = "",
    now: dt.datetime | None = None,
) -> CapacityRequest:
    """Approve; a change whose period has started is applied at once (if the tree allows)."""
    now = now or timezone.now()
    _check_decider(user, request)
    request = _lock(request)
    if request.state != S.SUBMITTED:
        raise ValidationError({"state": [f"request #{request.pk} is {request.state}, "
                                         "only submitted requests can be decided"]})
    approvers.refuse_own(user, request.requested_by_id, f"capacity request #{request.pk}")
    given, needed = approvers.approvals_state(
        request.events.filter(type="approval").values_list("actor_id", flat=True), user)
    approvers.badge_forget([user.pk])
    if given < needed:
        _event(request, type="approval", actor=user, at=now,
               message=f"approved by {user.get_username()} ({given} of {needed} approvals)"
               + (f": {comment.strip()}" if comment.strip() else ""))
        return request
    entry = _entry(request)
    values = _requested_values(request, entry)
    # Refuse now what would break the tree, even for a later start: the decider sees why.
    errors, warnings = tree_check_entry(
        queue=request.queue, flavor=request.flavor, resource=request.resource, values=values
    )
    if errors:
        raise ValidationError(errors)
    request.decided_by, request.decided_at = user, now
    request.decision_comment = comment.strip()
    _event(request, type="approved", actor=user, at=now, message=comment.strip(),
           payload={"warnings": warnings})
    if request.starts_at <= now:
        _apply(request, actor=user, now=now)
    else:
        _move(request, S.APPROVED)
        request.save()
    _notify(request, f"Capacity request #{request.pk} approved",
            f"{request.queue.path} {request.key}: approved by {user.get_username()}.\n"
            f"{comment}")
    return request


def _apply(request: CapacityRequest, *, actor: Any, now: dt.datetime) -> None:
    entry = _entry(request)
    previous = _entry_values(entry)
    values = _requested_values(request, entry)
    # Applied later by the beat, the change is still the decider's.
    warnings = _set_entry(request, values, actor=actor or request.decided_by,
                          reason=f"capacity request #{request.pk} applied")
    _move(request, S.ACTIVE)
    request.previous = previous
    request.save()
    _event(request, type="applied", actor=actor, at=now,
           message=f"{request.queue.path} {request.key}: min {fmt(values['min'])}, "
           f"max {fmt(values['max'])}",
           payload={"previous": previous, "warnings": warnings})


@transaction.atomic
def capacity_request_deny(
    *, user: User, request: CapacityRequest, comment: str,
    now: dt.datetime | None = None,
) -> CapacityRequest:
    """Deny with a comment saying why."""
    now = now or timezone.now()
    _check_decider(user, request)
    if not comment.strip():
        raise ValidationError({"comment": ["say why the request is denied"]})
    approvers.refuse_own(user, request.requested_by_id, f"capacity request #{request.pk}")
    approvers.badge_forget([user.pk])
    request = _lock(request)
    _move(request, S.DENIED)
    request.decided_by, request.decided_at = user, now
    request.decision_comment = comment.strip()
    request.save()
    _event(request, type="denied", actor=user, at=now, message=comment.strip())
    _notify(request, f"Capacity request #{request.pk} denied",
            f"{request.queue.path} {request.key}: denied by {user.get_username()}.\n{comment}")
    return request


@transaction.atomic
def capacity_request_cancel(
    *, user: User, request: CapacityRequest
) -> CapacityRequest:
    """The requester (or a decider) withdraws a request that has not taken effect."""
    if request.requested_by_id != user.pk:
        _check_decider(user, request)
    request = _lock(request)
    _move(request, S.CANCELLED)
    request.save()
    _event(request, type="cancelled", actor=user)
    if request.requested_by_id != user.pk:  # withdrawn by a decider: the requester is told
        _notify(request, f"Capacity request #{request.pk} cancelled",
                f"{request.queue.path} {request.key}: cancelled by {user.get_username()}.")
    return request


@transaction.atomic
def capacity_request_comment(
    *, user: User, request: CapacityRequest, message: str
) -> CapacityRequestEvent:
    """A comment on the request's timeline."""
    if not message.strip():
        raise ValidationError({"message": ["the comment is empty"]})
    return _event(request, type="comment", actor=user, message=message.strip())


@transaction.atomic
def capacity_request_revert(
    *, request: CapacityRequest, actor: User | None = None,
    now: dt.datetime | None = None,
) -> CapacityRequest:
    """Restore the entry as it was before the request (its period ended)."""
    now = now or timezone.now()
    request = _lock(request)
    if request.state != S.ACTIVE:
        raise ValidationError({"state": [f"request #{request.pk} is {request.state}, "
                                         "only active requests can be reverted"]})
    prev = request.previous or {"exists": False}
    values = None if not prev.get("exists") else {
        "min": decimal_or_none(prev["min"]), "max": decimal_or_none(prev["max"]),
        "lendable": decimal_or_none(prev["lendable"]),
    }
    warnings = _set_entry(request, values, actor=actor,
                          reason=f"capacity request #{request.pk} reverted")
    _move(request, S.REVERTED)
    request.save()
    _event(request, type="reverted", actor=actor, at=now,
           message=f"{request.queue.path} {request.key} restored", payload={
               "restored": prev, "warnings": warnings})
    _notify(request, f"Capacity request #{request.pk} ended",
            f"{request.queue.path} {request.key}: the period ended; the quota was restored.")
    return request


def capacity_requests_process_due(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Apply approved requests whose period started; revert active ones whose period ended.

    Each request is handled in its own transaction; one that would break the tree gets an
    event saying why (once) and is left as it is for an admin.
    """
    now = now or timezone.now()
    counts = {"applied": 0, "reverted": 0, "failed": 0}
    due_start = CapacityRequest.objects.filter(state=S.APPROVED, starts_at__lte=now)
    for req in due_start.order_by("pk"):
        try:
            with transaction.atomic():
                locked = _lock(req)
                if locked.state == S.APPROVED:
                    _apply(locked, actor=None, now=now)
                    counts["applied"] += 1
        except ValidationError as exc:
            counts["failed"] += 1
            _failed_once(req, "apply_failed", exc, now)
    due_end = CapacityRequest.objects.filter(state=S.ACTIVE, ends_at__lte=now)
    for req in due_end.order_by("pk"):
        try:
            capacity_request_revert(request=req, now=now)
            counts["reverted"] += 1
        except ValidationError as exc:
            counts["failed"] += 1
            _failed_once(req, "revert_failed", exc, now)
    return counts


def _failed_once(req: CapacityRequest, type: str, exc: ValidationError, now: dt.datetime) -> None:
    message = "; ".join(exc.messages)
    last = req.events.order_by("-at", "-id").first()
    if last is None or last.type != type or last.message != message:
        _event(req, type=type, at=now, message=message)
        if type == "apply_failed":  # approved, but the tree refuses it now: say why, once
            _notify(req, f"Capacity request #{req.pk} could not be applied",
                    f"{req.queue.path} {req.key}: approved, but the quota tree refuses the "
                    f"change now: {message}. An admin has to resolve it.")
