"""`approvals_badge` for base.html: how many requests wait for the user's decision."""

from django.utils.functional import SimpleLazyObject

from portal.pages.approvers import inbox_count


def approvals_badge(request):
    """Adds `approvals_waiting` (counted only when a page reads it; cached briefly)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"approvals_waiting": SimpleLazyObject(lambda: inbox_count(user))}


def notifications_bell(request):
    """Adds `notifications_unread` (counted only when a page reads it; cached briefly)."""
    from portal.notifications import unread_count

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"notifications_unread": SimpleLazyObject(lambda: unread_count(user))}
