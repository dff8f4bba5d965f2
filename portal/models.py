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


class UserSettings(models.Model):
    """A user's own settings (the profile page, /account/): the time zone pages show times
    in, and the kinds of notification they do not want."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="portal_settings")
    # An IANA name ("Europe/Berlin"); empty: the server's (settings.TIME_ZONE).
    time_zone = models.CharField(max_length=64, blank=True)
    # NotificationKind values the user muted: neither stored nor emailed.
    muted_kinds = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"settings of {self.user}"


class NotificationKind(models.TextChoices):
    """What a user is told of (each may be muted on the profile page)."""

    PREEMPTED = "preempted", "My workload was preempted"
    FINISHED = "finished", "My workload finished"
    FAILED = "failed", "My workload failed"
    CANCELLED = "cancelled", "My workload was cancelled by someone else"
    APPROVAL_NEEDED = "approval_needed", "A request waits for my approval"
    DECISION = "decision", "A decision on my request was made"


class Notification(models.Model):
    """One thing a user was told of, shown under the bell until marked read."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="notifications")
    kind = models.CharField(max_length=20, choices=NotificationKind.choices)
    created_at = models.DateTimeField(default=timezone.now)
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    workload_id = models.BigIntegerField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "read_at"], name="notification_unread")]

    def __str__(self) -> str:
        return f"{self.user}: {self.subject}"
