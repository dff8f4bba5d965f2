"""DRF authentication with hashed tokens: `Authorization: Token <token>`.

A token's lookup (hash -> token and user) is kept per process for a few seconds
(`ALLOT_TOKEN_CACHE_S`), so a client sending many requests costs no query each. Revoking a
token or saving its user drops the entry in this process at once (the signal handlers below,
connected by `PortalConfig.ready()`); other processes see it within that time.
`last_used_at` is written at most once a minute per token (`LAST_USED_EVERY`), not on every
request.
"""

from __future__ import annotations

import copy
import threading
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from rest_framework import authentication, exceptions

from portal.models import ApiToken, token_hash

LAST_USED_EVERY = timedelta(seconds=60)
_MAX_ENTRIES = 10_000

# key hash -> (monotonic expiry, token with its user)
_cache: dict[str, tuple[float, ApiToken]] = {}
_lock = threading.Lock()


def _ttl_s() -> float:
    return float(settings.ALLOT_TOKEN_CACHE_S)


def token_cache_forget(*, key_hash: str | None = None, user_id: int | None = None) -> None:
    """Drop cached lookups of one token, of every token of a user, or (no argument) all."""
    with _lock:
        if key_hash is None and user_id is None:
            _cache.clear()
            return
        for h, (_, token) in list(_cache.items()):
            if h == key_hash or (user_id is not None and token.user_id == user_id):
                _cache.pop(h, None)


def _forget_token(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    """A deleted (revoked) token stops working in this process at once, also when a request
    re-read it between the delete and the commit."""
    token_cache_forget(key_hash=instance.key_hash)
    transaction.on_commit(lambda: token_cache_forget(key_hash=instance.key_hash))


def _forget_user(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A saved or deleted user (deactivated, changed) is read afresh with its tokens."""
    token_cache_forget(user_id=instance.pk)
    transaction.on_commit(lambda: token_cache_forget(user_id=instance.pk))


def connect_signals() -> None:
    """Drop cached lookups when a token is deleted or a user saved or deleted."""
    post_delete.connect(_forget_token, sender=ApiToken, dispatch_uid="portal.forget_token")
    post_save.connect(_forget_user, sender=settings.AUTH_USER_MODEL,
                      dispatch_uid="portal.forget_user_save")
    post_delete.connect(_forget_user, sender=settings.AUTH_USER_MODEL,
                        dispatch_uid="portal.forget_user_delete")


def _lookup(key_hash: str) -> ApiToken:
    now = time.monotonic()
    entry = _cache.get(key_hash)
    if entry is not None and entry[0] > now:
        return entry[1]
    try:
        token = ApiToken.objects.select_related("user").get(key_hash=key_hash)
    except ApiToken.DoesNotExist as exc:
        raise exceptions.AuthenticationFailed("Invalid token.") from exc
    with _lock:
        if len(_cache) >= _MAX_ENTRIES:
            _cache.clear()
        _cache[key_hash] = (now + _ttl_s(), token)
    return token


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


class HashedTokenAuthentication(authentication.TokenAuthentication):
    """Like DRF's TokenAuthentication, but looks the token up by its SHA-256 hash."""

    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:  # type: ignore[override]
        cached = _lookup(token_hash(key))
        if not cached.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        _touch(cached)
        # Each request gets its own copies: views may set attributes on request.user.
        token = copy.copy(cached)
        token.user = copy.copy(cached.user)
        return (token.user, token)
