"""For every template: `approvals_badge` (how many requests wait for the user's decision),
`live_poll` (the one refresh rate of live pages), `notifications_bell` and `planner_links`
(whether the planner's pages are in the navigation)."""

from django.conf import settings
from django.utils.functional import SimpleLazyObject

from portal.pages.approvers import inbox_count

# A new lead sees the planner's links within this many seconds.
PLANNER_LINKS_TTL_S = 60


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


def planner_links(request):
    """Adds `planner_access`: the capacity planner's links (what-if, trace replay,
    recommendations) are shown to admins and team leads (read only when the navigation is
    drawn; a lead's answer cached for PLANNER_LINKS_TTL_S)."""
    from django.core.cache import cache

    from portal.pages.access import is_platform_admin, may_plan

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    if is_platform_admin(user):
        return {"planner_access": True}

    def lead() -> bool:
        key = f"allot:planner-links:{user.pk}"
        got = cache.get(key)
        if got is None:
            got = may_plan(user)
            cache.set(key, got, PLANNER_LINKS_TTL_S)
        return bool(got)

    return {"planner_access": SimpleLazyObject(lead)}
