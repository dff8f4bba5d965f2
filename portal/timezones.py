"""The time zone pages are shown in: the user's own setting (the profile page), else the
server's `TIME_ZONE`. The middleware activates it for each request; the setting is kept in
the session so a page costs no query for it."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

SESSION_KEY = "allot_time_zone"


def zone_of(name: str) -> zoneinfo.ZoneInfo | None:
    """The zone named `name`, or None for an empty or unknown name (the server's then)."""
    if not name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def remember(request: HttpRequest, name: str) -> None:
    """Keep the user's zone in their session (after they change it) and use it now."""
    if hasattr(request, "session"):
        request.session[SESSION_KEY] = name
    zone = zone_of(name)
    if zone is None:
        timezone.deactivate()
    else:
        timezone.activate(zone)


class UserTimeZoneMiddleware:
    """Activate the signed-in user's time zone for the request (after authentication)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user: Any = getattr(request, "user", None)
        name = ""
        if user is not None and user.is_authenticated and hasattr(request, "session"):
            kept = request.session.get(SESSION_KEY)
            if isinstance(kept, str):
                name = kept
            else:
                from portal.models import UserSettings

                name = UserSettings.objects.filter(user_id=user.pk).values_list(
                    "time_zone", flat=True).first() or ""
                request.session[SESSION_KEY] = name
        zone = zone_of(name)
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
