"""Reads of capacity requests, scoped to what the user may see."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Exists, OuterRef, Q, QuerySet

from portal.pages.access import Scope, user_scope
from quotas.capacity.models import CapacityRequest, CapacityRequestEvent, CapacityRequestState


def capacity_requests_visible(
    user: User | AnonymousUser,
) -> QuerySet[CapacityRequest]:
    """Requests the user may see: their own, their teams' queues', all for admins."""
    qs = CapacityRequest.objects.select_related("queue", "flavor", "requested_by", "decided_by")
    scope = user_scope(user)
    if scope.is_admin:
        return qs
    return qs.filter(Q(requested_by_id=user.pk) | Q(queue_id__in=scope.visible_queue_ids))


def capacity_requests_to_decide(
    user: User | AnonymousUser, *, scope: Scope | None = None,
) -> QuerySet[CapacityRequest]:
    """Open requests the user may approve or deny, oldest first (`scope`: if already known)."""
    scope = scope or user_scope(user)
    qs = CapacityRequest.objects.select_related("queue", "flavor", "requested_by").filter(
        state=CapacityRequestState.SUBMITTED
    )
    if not scope.is_admin:
        qs = qs.filter(queue_id__in=scope.decide_queue_ids)
    if user.is_authenticated:  # four eyes: not their own, not those they already approved
        qs = qs.exclude(requested_by_id=user.pk).exclude(Exists(
            CapacityRequestEvent.objects.filter(request_id=OuterRef("pk"), type="approval",
                                                actor_id=user.pk)))
    return qs.order_by("created_at", "id")
