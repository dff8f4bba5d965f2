"""Writes for accounts: personal API tokens (only their SHA-256 hash is stored)."""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from portal.models import ApiToken, TokenScope, token_generate, token_hash


def _expiry(days: int | None) -> Any:
    limit = settings.ALLOT_API_TOKEN_MAX_DAYS
    if days is None:
        days = settings.ALLOT_API_TOKEN_TTL_DAYS
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= limit:
        raise ValidationError({"expires_in_days": [
            f"a token lives from 1 to {limit} days, not {days!r}"]})
    return timezone.now() + timedelta(days=days)


@transaction.atomic
def api_token_create(
    *, user: Any, scope: str = TokenScope.WRITE, expires_in_days: int | None = None
) -> tuple[ApiToken, str]:
    """Issue a token for the user, `read` or `write`, living `expires_in_days` (default
    ALLOT_API_TOKEN_TTL_DAYS); returns the row and the clear token (shown once)."""
    if scope not in TokenScope.values:
        raise ValidationError({"scope": [
            f"{scope!r} is not a scope (one of {', '.join(TokenScope.values)})"]})
    expires_at = _expiry(expires_in_days)
    raw = token_generate()
    token = ApiToken.objects.create(user=user, key_hash=token_hash(raw), prefix=raw[:8],
                                    scope=scope, expires_at=expires_at)
    return token, raw


@transaction.atomic
def api_token_revoke(*, token: ApiToken) -> None:
    """Revoke one token: requests that send it are refused from now on."""
    ApiToken.objects.filter(pk=token.pk).delete()


@transaction.atomic
def api_token_revoke_all(*, user: Any) -> int:
    """Revoke every token of the user; returns how many there were."""
    count, _ = ApiToken.objects.filter(user=user).delete()
    return count
