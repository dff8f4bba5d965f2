"""DRF authentication with hashed tokens: `Authorization: Token <token>`."""

from django.utils import timezone
from rest_framework import authentication, exceptions

from portal.models import ApiToken, token_hash


class HashedTokenAuthentication(authentication.TokenAuthentication):
    """Like DRF's TokenAuthentication, but looks the token up by its SHA-256 hash."""

    keyword = "Token"

    def authenticate_credentials(self, key: str):  # type: ignore[override]
        try:
            token = ApiToken.objects.select_related("user").get(key_hash=token_hash(key))
        except ApiToken.DoesNotExist as exc:
            raise exceptions.AuthenticationFailed("Invalid token.") from exc
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return (token.user, token)
