"""The profile page (/account/): the user's time zone, muted notifications, links to their API
tokens; the notifications list (/account/notifications/) with mark-as-read."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.forms import ProfileForm
from portal.models import Notification
from portal.notifications import notifications_mark_read, user_settings
from portal.pages.access import signed_in
from portal.selectors import api_token_list
from portal.timezones import remember

NOTIFICATION_ROWS = 50


def profile_settings_save(*, user: object, time_zone: str, muted_kinds: list[str]) -> None:
    """Store the user's time zone and muted notification kinds."""
    row = user_settings(user)
    row.time_zone, row.muted_kinds = time_zone, sorted(set(muted_kinds))
    row.save(update_fields=["time_zone", "muted_kinds"])
    remember(row.user_id, time_zone)


@login_required
def profile(request: HttpRequest) -> HttpResponse:
    """The user's profile: who they are, their settings, their tokens and notifications."""
    row = user_settings(request.user)
    if request.method == "POST":
        form = ProfileForm(request.POST)
        if form.is_valid():
            profile_settings_save(user=request.user, **form.cleaned_data)
            messages.success(request, "Settings saved.")
            return redirect("profile")
    else:
        form = ProfileForm(initial={"time_zone": row.time_zone, "muted_kinds": row.muted_kinds})
    tokens = api_token_list(user=request.user)
    return render(request, "portal/profile.html", {
        "form": form, "tokens_count": tokens.count(),
        "unread": Notification.objects.filter(user=signed_in(request.user),
                                              read_at__isnull=True).count(),
    }, status=400 if form.errors else 200)


@login_required
def notification_list(request: HttpRequest) -> HttpResponse:
    """The user's notifications, newest first, unread marked."""
    qs = Notification.objects.filter(user=signed_in(request.user))
    page = Paginator(qs, NOTIFICATION_ROWS).get_page(request.GET.get("page"))
    return render(request, "portal/notifications.html", {"page": page})


@login_required
@require_POST
def notification_read(request: HttpRequest) -> HttpResponse:
    """Mark one notification (`id`) or all of the user's as read."""
    raw = request.POST.get("id", "")
    if raw:
        if not raw.isdigit():
            messages.error(request, f"id must be a notification's number, not {raw!r}.")
            return redirect("notifications")
        n = notifications_mark_read(user=request.user, ids=[int(raw)])
    else:
        n = notifications_mark_read(user=request.user)
    messages.success(request, f"{n} notification{'s' if n != 1 else ''} marked read.")
    return redirect("notifications")


@login_required
def search(request: HttpRequest) -> HttpResponse:
    """Workloads, queues and users matching `q`, grouped by kind, as far as the user may see."""
    from portal.search import SearchError, search_query_clean, site_search

    raw = request.GET.get("q", "")
    try:
        results, error = site_search(user=request.user, q=search_query_clean(raw)), ""
    except SearchError as exc:
        results, error = None, str(exc)
    return render(request, "portal/search.html",
                  {"results": results, "error": error, "search_q": raw[:100]},
                  status=400 if error and raw else 200)
