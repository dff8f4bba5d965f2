"""For every template: `approvals_badge` (how many requests wait for the user's decision) and
`live_poll` (the one refresh rate of live pages)."""

from django.conf import settings
from django.utils.functional import SimpleLazyObject

from portal.pages.approvers import inbox_count


def approvals_badge(request):
    """Adds `approvals_waiting` (counted only when a page reads it; cached briefly)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"approvals_waiting": SimpleLazyObject(lambda: inbox_count(user))}


def live_poll(request):
    """Adds `live_poll_s`: the rate (seconds, setting ALLOT_LIVE_POLL_SECONDS) at which every
    live page and widget polls; the one place templates get it from."""
    return {"live_poll_s": settings.ALLOT_LIVE_POLL_SECONDS}


def notifications_bell(request):
    """Adds `notifications_unread` (counted only when a page reads it; cached briefly)."""
    from portal.notifications import unread_count

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"notifications_unread": SimpleLazyObject(lambda: unread_count(user))}
