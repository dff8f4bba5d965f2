"""DRF authentication with hashed tokens: `Authorization: Token <token>`, or the same token
as `Authorization: Bearer <token>` (what most HTTP clients and OpenAPI tools send).

A token's lookup (hash -> token and user) is cached per thread under the change log's `auth`
topic (core/changes.py): one cheap check per request tells whether any token or user changed
since, in any process, so a revoked token, a deactivated user or a changed scope or expiry
is refused by the next request everywhere, as soon as it commits. Off PostgreSQL tokens are
read on every request. `last_used_at` is written at most once a minute per token
(`LAST_USED_EVERY`), not on every request.

A token past its `expires_at` is refused (401, naming when it expired); a `read` token may
only use the safe methods (403 on others).
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.permissions import SAFE_METHODS

from core import changes
from portal.models import ApiToken, TokenScope, token_hash

LAST_USED_EVERY = timedelta(seconds=60)


def _load(key_hash: str) -> ApiToken:
    try:
        return ApiToken.objects.select_related("user").get(key_hash=key_hash)
    except ApiToken.DoesNotExist as exc:
        raise exceptions.AuthenticationFailed("Invalid token.") from exc


def _lookup(key_hash: str) -> ApiToken:
    view = changes.validate()
    if view is None:
        return _load(key_hash)
    return view.get("auth", key_hash, lambda: _load(key_hash))


def _touch(token: ApiToken) -> None:
    """Record use at most once per LAST_USED_EVERY: the cached row remembers the last write,
    and the UPDATE's condition keeps other processes from writing again within it."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_EVERY:
        return
    token.last_used_at = now
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_EVERY)
    ).update(last_used_at=now)


def _refuse_unusable(token: ApiToken) -> None:
    if not token.user.is_active:
        raise exceptions.AuthenticationFailed("User inactive or deleted.")
    if token.expires_at <= timezone.now():
        raise exceptions.AuthenticationFailed(
            f"Token expired on {token.expires_at:%Y-%m-%d %H:%M} UTC; create a new one "
            "(POST /api/v1/auth/token).")


class HashedTokenAuthentication(authentication.TokenAuthentication):
    """Like DRF's TokenAuthentication, but looks the token up by its SHA-256 hash, refuses
    expired tokens and keeps read tokens to the safe methods."""

    keyword = "Token"

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        found = self._bearer(request) or super().authenticate(request)
        if found is not None and found[1].scope == TokenScope.READ \
                and request.method not in SAFE_METHODS:
            raise exceptions.PermissionDenied(
                f"This token's scope is read: it may only GET, HEAD or OPTIONS, not "
                f"{request.method}; use a token with scope write.")
        return found

    def _bearer(self, request: Any) -> tuple[Any, ApiToken] | None:
        """`Bearer <token>`: the same token, the same checks as `Token <token>`."""
        auth = authentication.get_authorization_header(request).split()
        if not auth or auth[0].lower() != b"bearer":
            return None
        if len(auth) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid bearer header: give exactly one token after 'Bearer'.")
        try:
            key = auth[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed(
                "Invalid bearer header: the token has invalid characters.") from exc
        return self.authenticate_credentials(key)

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:  # type: ignore[override]
        cached = _lookup(token_hash(key))
        _refuse_unusable(cached)
        _touch(cached)
        # Each request gets its own copies: views may set attributes on request.user.
        token = copy.copy(cached)
        token.user = copy.copy(cached.user)
        return (token.user, token)
