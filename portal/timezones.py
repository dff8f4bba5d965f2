"""The time zone pages are shown in: the user's own setting (the profile page), else the
server's `TIME_ZONE`. The middleware activates it for each request; the setting is cached per
user (`ZONE_TTL_S`, forgotten when the user changes it), so a page rarely costs a query."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

ZONE_TTL_S = 3600


def _key(user_id: int) -> str:
    return f"allot:time-zone:{user_id}"


def user_zone_name(user_id: int) -> str:
    """The user's time zone name ('' for the server's), cached."""
    from django.core.cache import cache

    name = cache.get(_key(user_id))
    if name is None:
        from portal.models import UserSettings

        name = UserSettings.objects.filter(user_id=user_id).values_list(
            "time_zone", flat=True).first() or ""
        cache.set(_key(user_id), name, ZONE_TTL_S)
    return str(name)


def zone_of(name: str) -> zoneinfo.ZoneInfo | None:
    """The zone named `name`, or None for an empty or unknown name (the server's then)."""
    if not name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def remember(user_id: int, name: str) -> None:
    """The user changed their zone: cache it and use it for the rest of this request."""
    from django.core.cache import cache

    cache.set(_key(user_id), name, ZONE_TTL_S)
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
        if user is not None and user.is_authenticated:
            name = user_zone_name(user.pk)
        zone = zone_of(name)
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
