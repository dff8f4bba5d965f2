"""Reads for accounts: a user's API tokens."""

from typing import Any

from django.db.models import QuerySet

from portal.models import ApiToken


def api_token_list(*, user: Any) -> QuerySet[ApiToken]:
    """The user's tokens, newest first (expired ones too, until revoked)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-pk")
