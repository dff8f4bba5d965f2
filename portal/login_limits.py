"""Failed sign-ins limited per username and per client address (django-ratelimit's counters).

Both the API (`POST /api/v1/auth/token`) and the sign-in page ask `login_wait_s` before they
check a password, so a refused guess costs two cache reads and no password hashing, and
answer 429. Every other way in (the admin's sign-in) goes through `LimitedModelBackend` (or
the LDAP directory's `portal.sso.ldap.LimitedLDAPBackend`), which refuses the same without
checking the password. Each failure, whichever the way,
counts once against the username and once against the address (Django's
`user_login_failed` signal). After
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
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django_ratelimit.core import get_usage

from portal.sso.outcome import noted_error

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


class LimitedModelBackend(ModelBackend):
    """Django's backend, refusing a username or address with too many failures before the
    password is checked (`authenticate()` then returns None, as for a wrong password)."""

    def authenticate(self, request: Any, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> Any:
        if request is not None and username is not None and login_wait_s(request, username):
            raise PermissionDenied
        return super().authenticate(request, username=username, password=password, **kwargs)


def _count_failure(sender: Any, credentials: dict[str, Any], request: Any = None,
                   **kwargs: Any) -> None:
    # Only password guesses count: not a single sign-on answer (no username), nor a password
    # a directory that failed could not check (portal/sso/ldap.py notes it on the request).
    if request is not None and "username" in credentials and noted_error(request) is None:
        login_failed(request, str(credentials.get("username") or ""))


def connect_signals() -> None:
    """Count every failed sign-in (`authenticate()` found no user)."""
    user_login_failed.connect(_count_failure, dispatch_uid="portal.login_limits.count")
