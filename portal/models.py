"""Accounts: API tokens, stored as SHA-256 hashes (the clear token is shown once)."""

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


def token_hash(raw: str) -> str:
    """SHA-256 hex digest of a clear token: what the database keeps."""
    return hashlib.sha256(raw.encode()).hexdigest()


def token_generate() -> str:
    """A new clear token (shown to its owner once)."""
    return secrets.token_urlsafe(32)


def token_default_expiry() -> datetime:
    """When a token issued now expires by default (`ALLOT_API_TOKEN_TTL_DAYS` from now)."""
    return timezone.now() + timedelta(days=settings.ALLOT_API_TOKEN_TTL_DAYS)


class TokenScope(models.TextChoices):
    """What a token may do: `read` only the safe methods, `write` what its user may."""

    READ = "read", "read (GET, HEAD, OPTIONS only)"
    WRITE = "write", "write (everything its user may do)"


class ApiToken(models.Model):
    """A personal API token; only its hash and a short prefix (to recognise it) are stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    scope = models.CharField(max_length=5, choices=TokenScope.choices, default=TokenScope.WRITE)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(default=token_default_expiry)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.prefix}…"

    @property
    def expired(self) -> bool:
        """Whether the token is past its expiry (it is then refused)."""
        return self.expires_at <= timezone.now()
