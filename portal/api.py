"""API for accounts: `POST /api/v1/auth/token` issues a token for a username and password,
`DELETE` revokes; `GET /api/v1/auth/tokens` lists the caller's tokens, `POST` issues one for a
browser session (single sign-on users have no password), `DELETE .../tokens/{id}` revokes
one."""

from typing import Any

from django.contrib.auth import authenticate
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.login_limits import login_wait_s, refusal
from portal.models import ApiToken, TokenScope
from portal.selectors import api_token_list
from portal.services import api_token_create, api_token_revoke, api_token_revoke_all
from portal.sso.options import sign_in_options
from portal.sso.outcome import noted_error


class NewTokenInput(serializers.Serializer):
    scope = serializers.ChoiceField(
        choices=TokenScope.choices, default=TokenScope.WRITE,
        help_text="`read`: GET, HEAD and OPTIONS only; `write`: everything the user may do.")
    expires_in_days = serializers.IntegerField(
        required=False, min_value=1,
        help_text="Lifetime in days (default ALLOT_API_TOKEN_TTL_DAYS, 90; at most "
        "ALLOT_API_TOKEN_MAX_DAYS, 365).")


class TokenInput(NewTokenInput):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"})


class TokenOutput(serializers.Serializer):
    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`; shown once.")
    prefix = serializers.CharField(help_text="The token's first characters, to recognise it.")
    username = serializers.CharField()
    scope = serializers.CharField()
    expires_at = serializers.DateTimeField()


class TokenListOutput(serializers.ModelSerializer):
    expired = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiToken
        fields = ("id", "prefix", "scope", "created_at", "expires_at", "last_used_at",
                  "expired")


class RevokeOutput(serializers.Serializer):
    revoked = serializers.IntegerField()


class TokenView(APIView):
    """Issue (POST, with username and password) or revoke (DELETE) an API token."""

    def get_authenticators(self):  # type: ignore[no-untyped-def]
        if self.request is not None and self.request.method == "POST":
            return []  # credentials are in the body; a stale session must not interfere
        return super().get_authenticators()

    def get_permissions(self):  # type: ignore[no-untyped-def]
        if self.request is not None and self.request.method == "POST":
            return [AllowAny()]
        return [IsAuthenticated()]

    @extend_schema(
        request=TokenInput, auth=[],
        responses={201: TokenOutput, 400: OpenApiResponse(description="Wrong credentials."),
                   429: OpenApiResponse(description="Too many failed sign-ins for the username "
                                        "or the address; Retry-After says when to try again.")},
    )
    def post(self, request: Request) -> Response:
        options = sign_in_options()
        if not options.passwords:
            return Response({"detail": options.passwords_off()},
                            status=status.HTTP_403_FORBIDDEN)
        data = TokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        username = data.validated_data["username"]
        wait = login_wait_s(request._request, username)
        if wait:
            return Response({"detail": refusal(wait), "retry_after_s": wait},
                            status=status.HTTP_429_TOO_MANY_REQUESTS,
                            headers={"Retry-After": str(wait)})
        user = authenticate(
            request._request, username=username, password=data.validated_data["password"])
        reason = noted_error(request._request)
        if user is None and reason is not None:  # the directory failed: not the password
            return Response({"detail": f"Signing in failed: {reason}."},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        if user is None or not user.is_active:  # counted by login_limits (user_login_failed)
            return Response(
                {"detail": "Unable to sign in with the username and password given."},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return _issued(user, data.validated_data)

    @extend_schema(
        request=None,
        responses={200: RevokeOutput},
        description="With token authentication, revokes that token; with a browser session, "
        "revokes all of the user's tokens.",
    )
    def delete(self, request: Request) -> Response:
        if isinstance(request.auth, ApiToken):
            api_token_revoke(token=request.auth)
            count = 1
        else:
            count = api_token_revoke_all(user=request.user)
        return Response(RevokeOutput({"revoked": count}).data)


def _issued(user: Any, data: dict[str, Any]) -> Response:
    token, raw = api_token_create(user=user, scope=data["scope"],
                                  expires_in_days=data.get("expires_in_days"))
    out = TokenOutput({"token": raw, "prefix": token.prefix, "username": user.get_username(),
                       "scope": token.scope, "expires_at": token.expires_at})
    return Response(out.data, status=status.HTTP_201_CREATED)


class TokenList(generics.ListAPIView):
    """The caller's API tokens, newest first: prefix, scope, created, expires, last used; POST
    with a browser session issues one (how a single sign-on user, who has no password, gets a
    token without the page)."""

    serializer_class = TokenListOutput

    @extend_schema(
        request=NewTokenInput,
        responses={201: TokenOutput, 403: OpenApiResponse(
            description="Sent with an API token: a token cannot issue tokens.")},
    )
    def post(self, request: Request) -> Response:
        if isinstance(request.auth, ApiToken):
            return Response({"detail": "An API token cannot issue tokens (each would outlive "
                             "the last): sign in in a browser and use that session, or POST "
                             "/api/v1/auth/token with a username and password."},
                            status=status.HTTP_403_FORBIDDEN)
        data = NewTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        return _issued(request.user, data.validated_data)

    def get_queryset(self):  # type: ignore[no-untyped-def]
        if getattr(self, "swagger_fake_view", False):  # the schema is built with no user
            return ApiToken.objects.none()
        return api_token_list(user=self.request.user)


class TokenDetail(APIView):
    """Revoke one of the caller's tokens by id (another user's token is 404)."""

    @extend_schema(request=None, responses={200: RevokeOutput})
    def delete(self, request: Request, pk: int) -> Response:
        token = get_object_or_404(api_token_list(user=request.user), pk=pk)
        api_token_revoke(token=token)
        return Response(RevokeOutput({"revoked": 1}).data)


