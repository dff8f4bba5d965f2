"""Who approves what: the approver path of a queue, the four-eyes rule, the inbox badge.

Every held workload and capacity request has approvers: the leads deciding for its queue
(`access.Scope.can_decide`), else the platform admins. Nobody decides their own request, and
`ALLOT_MIN_APPROVERS` distinct people (default 1) must approve before it takes effect. The
approvers are emailed when a request arrives; the inbox count in the navigation is cached
for `BADGE_TTL_S` per user and forgotten when the user decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Q

from portal.pages.access import _related
from quotas.models import Queue, TeamMembership, TeamRole

BADGE_TTL_S = 30


def min_approvers() -> int:
    """How many distinct people other than the requester must approve (at least 1)."""
    return max(1, int(settings.ALLOT_MIN_APPROVERS))


def approvers_for(queue_id: int, *, requester_id: int | None = None) -> list[User]:
    """The people who decide a request on this queue: its leads, else the platform admins;
    never the requester."""
    path = Queue.objects.filter(pk=queue_id).values_list("path", flat=True).first()
    if path is None:
        return []
    rows = TeamMembership.objects.filter(role=TeamRole.LEAD, user__is_active=True).values_list(
        "user_id", "team__queues__path", "team__department__path")
    leads = {uid for uid, team_path, dept in rows
             if team_path and _related([(team_path, dept)], [(queue_id, path)])}
    leads.discard(requester_id)
    if leads:
        return list(User.objects.filter(pk__in=leads).order_by("username"))
    admins = User.objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True)
    if requester_id is not None:
        admins = admins.exclude(pk=requester_id)
    return list(admins.order_by("username"))


def refuse_own(user: Any, requester_id: int | None, what: str) -> None:
    """Nobody decides their own request."""
    if requester_id is not None and user.pk == requester_id:
        raise PermissionDenied(f"{user.get_username()} requested {what} and may not decide it: "
                               "another lead or a platform admin decides")


def approvals_state(approver_ids: Iterable[int | None], user: Any) -> tuple[int, int]:
    """(distinct approvals including `user`'s, approvals needed); PermissionDenied if `user`
    already approved."""
    given = {a for a in approver_ids if a is not None}
    if user.pk in given:
        raise PermissionDenied(f"{user.get_username()} has already approved it: "
                               f"{min_approvers()} different people must approve")
    return len(given) + 1, min_approvers()


def notify_approvers(*, queue_id: int, requester_id: int | None, subject: str,
                     body: str, workload_id: int | None = None) -> None:
    """Tell every approver of the queue (after the request is committed): a notification
    under their bell and an email, unless they muted "approval needed"."""
    from django.urls import reverse

    from portal.models import NotificationKind
    from portal.notifications import notify

    notify(user_ids=[u.pk for u in approvers_for(queue_id, requester_id=requester_id)],
           kind=NotificationKind.APPROVAL_NEEDED, subject=subject, body=body,
           url=reverse("approval-inbox"), workload_id=workload_id)
    badge_forget()


def _badge_key(user_id: int) -> str:
    return f"allot:approvals-badge:{user_id}"


def badge_forget(user_ids: Iterable[int] | None = None) -> None:
    """Forget cached inbox counts (of `user_ids`, or of everyone: a new request)."""
    if user_ids is None:
        cache.set("allot:approvals-badge:epoch", (cache.get("allot:approvals-badge:epoch") or 0)
                  + 1, None)
        return
    cache.delete_many([_badge_key(u) for u in user_ids])


def inbox_count(user: Any) -> int:
    """Requests waiting for `user`'s decision (held workloads and capacity requests, not their
    own, not already approved by them); cached for BADGE_TTL_S."""
    if not getattr(user, "is_authenticated", False):
        return 0
    epoch = cache.get("allot:approvals-badge:epoch") or 0
    key = _badge_key(user.pk)
    got = cache.get(key)
    if got is not None and got[0] == epoch:
        return int(got[1])
    from portal.pages.access import user_scope
    from portal.pages.selectors import workloads_to_decide
    from quotas.capacity.selectors import capacity_requests_to_decide

    scope = user_scope(user)
    count = 0
    if scope.is_admin or scope.is_lead:
        count = (workloads_to_decide(scope, user=user).count()
                 + capacity_requests_to_decide(user, scope=scope).count())
    cache.set(key, (epoch, count), BADGE_TTL_S)
    return count
