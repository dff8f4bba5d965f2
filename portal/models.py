"""Accounts: API tokens, stored as SHA-256 hashes (the clear token is shown once)."""

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save


def token_hash(raw: str) -> str:
    """SHA-256 hex digest of a clear token: what the database keeps."""
    return hashlib.sha256(raw.encode()).hexdigest()


def token_generate() -> str:
    """A new clear token (shown to its owner once)."""
    return secrets.token_urlsafe(32)


class ApiToken(models.Model):
    """A personal API token; only its hash and a short prefix (to recognise it) are stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.prefix}…"


def _forget_token(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    """A deleted (revoked) token stops working in this process at once, also when a request
    re-read it between the delete and the commit."""
    from portal.authentication import token_cache_forget

    token_cache_forget(key_hash=instance.key_hash)
    transaction.on_commit(lambda: token_cache_forget(key_hash=instance.key_hash))


def _forget_user(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A saved or deleted user (deactivated, changed) is read afresh with its tokens."""
    from portal.authentication import token_cache_forget

    token_cache_forget(user_id=instance.pk)
    transaction.on_commit(lambda: token_cache_forget(user_id=instance.pk))


post_delete.connect(_forget_token, sender=ApiToken, dispatch_uid="portal.forget_token")
post_save.connect(_forget_user, sender=settings.AUTH_USER_MODEL,
                  dispatch_uid="portal.forget_user_save")
post_delete.connect(_forget_user, sender=settings.AUTH_USER_MODEL,
                    dispatch_uid="portal.forget_user_delete")
