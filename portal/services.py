"""Writes for accounts: personal API tokens (only their SHA-256 hash is stored)."""

from typing import Any

from django.db import transaction

from portal.models import ApiToken, token_generate, token_hash


@transaction.atomic
def api_token_create(*, user: Any) -> tuple[ApiToken, str]:
    """Issue a token for the user; returns the row and the clear token (shown once)."""
    raw = token_generate()
    token = ApiToken.objects.create(user=user, key_hash=token_hash(raw), prefix=raw[:8])
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
