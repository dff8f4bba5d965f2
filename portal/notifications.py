"""Notifications: what a user is told of (their workload preempted, finished or failed, or
cancelled by a lead or an admin; a request waiting for their approval; a decision on their
request, or its cancel by a decider), stored per user for the
bell in the navigation and emailed, unless the user muted that kind on their profile page.

They come from the state changes themselves, never from polling: workload events reach
`workload_events_told` through `scheduling.extensions.register_event_listener` (registered in
`PortalConfig.ready()`) once the transaction that wrote them commits; the approval code calls
`notify` where it already emailed the approvers and the requester.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.mail import send_mail
from django.urls import reverse
from django.utils import timezone

from portal.models import Notification, NotificationKind, UserSettings

BELL_TTL_S = 30
# Workload event types -> the kind of notification their owner gets.
EVENT_KINDS = {
    "preempted": NotificationKind.PREEMPTED,
    "finished": NotificationKind.FINISHED,
    "failed": NotificationKind.FAILED,
    "cancelled": NotificationKind.CANCELLED,
}


def muted_kinds(user_ids: Iterable[int]) -> dict[int, set[str]]:
    """The kinds each user muted (users with no settings muted none)."""
    return {uid: set(kinds or []) for uid, kinds in UserSettings.objects.filter(
        user_id__in=list(user_ids)).values_list("user_id", "muted_kinds")}


def notify(*, user_ids: Sequence[int], kind: str, subject: str, body: str = "", url: str = "",
           workload_id: int | None = None, email: bool = True) -> list[Notification]:
    """Store one notification for each user who did not mute `kind`, and email those with an
    address (`email`); returns the stored rows."""
    ids = list(dict.fromkeys(uid for uid in user_ids if uid is not None))
    if not ids:
        return []
    muted = muted_kinds(ids)
    ids = [uid for uid in ids if kind not in muted.get(uid, set())]
    now = timezone.now()
    rows = Notification.objects.bulk_create([
        Notification(user_id=uid, kind=kind, created_at=now, subject=subject[:200], body=body,
                     url=url[:300], workload_id=workload_id) for uid in ids])
    bell_forget(ids)
    if email and ids:
        for address in User.objects.filter(pk__in=ids).exclude(email="").values_list(
                "email", flat=True):
            send_mail(subject, f"{body}\n\n{url}".strip(), None, [address], fail_silently=True)
    return rows


def workload_events_told(notes: Sequence[Any]) -> None:
    """The listener of workload events: their owners are told of preemptions, ends and
    failures (one notification per event)."""
    wanted = [n for n in notes if n.type in EVENT_KINDS]
    if not wanted:
        return
    from scheduling.models import Workload

    rows = {w["id"]: w for w in Workload.objects.filter(
        pk__in={n.workload_id for n in wanted}).values("id", "name", "owner_id", "queue__path")}
    actors = dict(User.objects.filter(pk__in={n.actor_id for n in wanted if n.actor_id})
                  .values_list("pk", "username"))
    for n in wanted:
        w = rows.get(n.workload_id)
        if w is None or w["owner_id"] is None:
            continue
        if n.type == "cancelled":
            # The owner knows of their own cancel; one by a lead or an admin is news.
            if n.actor_id is None or n.actor_id == w["owner_id"]:
                continue
            verb = f"was cancelled by {actors.get(n.actor_id, 'someone else')}"
            detail = ""
        else:
            verb = {"preempted": "was preempted", "finished": "finished",
                    "failed": "failed"}[n.type]
            detail = n.message
        notify(user_ids=[w["owner_id"]], kind=EVENT_KINDS[n.type],
               subject=f"Workload {w['name']} {verb}",
               body=f"{w['name']} in {w['queue__path']} {verb}"
               + (f": {detail}" if detail else "."),
               url=reverse("workload-detail", args=[w["id"]]), workload_id=w["id"])


def _bell_key(user_id: int) -> str:
    return f"allot:notifications-bell:{user_id}"


def bell_forget(user_ids: Iterable[int]) -> None:
    """Forget the cached unread counts of these users."""
    cache.delete_many([_bell_key(u) for u in user_ids])


def unread_count(user: Any) -> int:
    """The user's unread notifications (cached BELL_TTL_S, forgotten on each change)."""
    if not getattr(user, "is_authenticated", False):
        return 0
    got = cache.get(_bell_key(user.pk))
    if got is None:
        got = Notification.objects.filter(user_id=user.pk, read_at__isnull=True).count()
        cache.set(_bell_key(user.pk), got, BELL_TTL_S)
    return int(got)


def notifications_mark_read(*, user: Any, ids: Sequence[int] | None = None) -> int:
    """Mark the user's notifications read (`ids`, or all); returns how many changed."""
    qs = Notification.objects.filter(user_id=user.pk, read_at__isnull=True)
    if ids is not None:
        qs = qs.filter(pk__in=list(ids))
    n = qs.update(read_at=timezone.now())
    bell_forget([user.pk])
    return n


def user_settings(user: Any) -> UserSettings:
    """The user's settings row (created on first read)."""
    row, _ = UserSettings.objects.get_or_create(user_id=user.pk)
    return row
