"""Failed sign-ins limited per username and per client address (django-ratelimit's counters).

Both the API (`POST /api/v1/auth/token`) and the sign-in page ask `login_wait_s` before they
check a password, so a refused guess costs two cache reads and no password hashing; each
failure counts once against the username and once against the address. After
`ALLOT_LOGIN_FAILURES` failures within a window of `ALLOT_LOGIN_WINDOW_S` seconds either key is
refused until its window ends (429, Retry-After). The counters live in the default cache,
which must be shared by every process (Redis: `CACHE_URL` or `REDIS_URL`) for the limit to
hold across them. When the cache cannot be reached the sign-in goes ahead (logged): an outage
of the cache does not lock everyone out.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django_ratelimit.core import get_usage

logger = logging.getLogger(__name__)

# group -> what the counter is keyed by (the address is django-ratelimit's `ip` key:
# REMOTE_ADDR, or the header named by RATELIMIT_IP_META_KEY behind a proxy)
_USER, _ADDRESS = "allot-login-user", "allot-login-ip"


def _rate() -> str:
    return f"{settings.ALLOT_LOGIN_FAILURES}/{settings.ALLOT_LOGIN_WINDOW_S}s"


def _usages(request: HttpRequest, username: str, increment: bool) -> list[dict[str, Any]]:
    name = username.strip().casefold()
    out = []
    for group, key in ((_USER, lambda group, request: name), (_ADDRESS, "ip")):
        try:
            usage = get_usage(request, group=group, key=key, rate=_rate(),
                              increment=increment)
        except Exception:  # the cache is down: sign-ins are not locked out by it
            logger.exception("sign-in limit not checked: the cache failed")
            continue
        if usage is not None:
            out.append(usage)
    return out


def login_wait_s(request: HttpRequest, username: str) -> int:
    """Seconds before this username or address may try a password again (0: now)."""
    waits = [max(1, int(u["time_left"])) for u in _usages(request, username, False)
             if u["count"] >= u["limit"]]
    return max(waits, default=0)


def login_failed(request: HttpRequest, username: str) -> None:
    """Count one failed sign-in against the username and the address."""
    _usages(request, username, True)


def refusal(wait_s: int) -> str:
    """The message shown to a client that must wait."""
    return (f"Too many failed sign-ins for this username or from this address "
            f"({settings.ALLOT_LOGIN_FAILURES} within {settings.ALLOT_LOGIN_WINDOW_S} s): "
            f"try again in {wait_s} s.")
