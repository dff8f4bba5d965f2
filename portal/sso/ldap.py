"""Sign-in against an LDAP directory (django-auth-ldap; settings from ALLOT_LDAP_*, read by
`ldap_settings.py`): the user binds with their own password, is created on first sign-in,
and at each sign-in their teams, roles and admin flags follow their directory groups
(`services.sso_user_sync`).

The sign-in limit (portal/login_limits.py) holds here as for local passwords: a username or
address with too many failures is refused before the directory is asked. A directory that
fails (unreachable, or its service account refused) is no wrong password: the failure is
noted on the request (the page and the API answer 503 naming it) and not counted against
the user.
"""

from __future__ import annotations

import logging
from typing import Any

import ldap
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django_auth_ldap.backend import LDAPBackend, ldap_error

from portal.login_limits import login_wait_s
from portal.sso.outcome import note_error
from portal.sso.services import sso_user_sync

logger = logging.getLogger(__name__)


def _unreachable(request: Any, exc: Exception) -> None:
    detail = exc.args[0].get("desc", str(exc)) if exc.args and isinstance(
        exc.args[0], dict) else str(exc)
    uri = getattr(settings, "AUTH_LDAP_SERVER_URI", "")
    note_error(request, f"the directory ({uri}) could not check the password: {detail}; try "
                        "again later, or tell an admin if it lasts")


def _on_ldap_error(sender: Any, context: str, user: Any, request: Any = None,
                   exception: Exception | None = None, **kwargs: Any) -> None:
    if context == "authenticate" and exception is not None:
        _unreachable(request, exception)


class LimitedLDAPBackend(LDAPBackend):
    """django-auth-ldap's backend under the sign-in limit, keeping teams and roles in step
    with the user's directory groups."""

    def authenticate(self, request: Any, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> Any:
        if request is not None and username is not None and login_wait_s(request, username):
            raise PermissionDenied
        self._request = request
        return super().authenticate(request, username=username, password=password, **kwargs)

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> Any:
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is None:
            return None
        groups: set[str] = set()
        if settings.ALLOT_SSO_GROUP_TEAMS or settings.ALLOT_SSO_ADMIN_GROUPS:
            try:
                groups = set(ldap_user.group_names) | set(ldap_user.group_dns)
            except ldap.LDAPError as exc:  # half an answer must not take memberships away
                logger.warning("LDAP groups of %s not read: %s", user.get_username(), exc)
                _unreachable(self._request, exc)
                return None
        sso_user_sync(user=user, groups=groups, source="ldap")
        return user


# Connected on import: Django imports this module only when the backend is configured.
ldap_error.connect(_on_ldap_error, dispatch_uid="portal.sso.ldap.unreachable")
