"""API for accounts: `POST /api/v1/auth/token` issues a token, `DELETE` revokes."""

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.models import ApiToken
from portal.services import api_token_create, api_token_revoke, api_token_revoke_all


class TokenInput(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"})


class TokenOutput(serializers.Serializer):
    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`; shown once.")
    prefix = serializers.CharField(help_text="The token's first characters, to recognise it.")
    username = serializers.CharField()


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
        responses={201: TokenOutput, 400: OpenApiResponse(description="Wrong credentials.")},
    )
    def post(self, request: Request) -> Response:
        data = TokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request._request,
            username=data.validated_data["username"],
            password=data.validated_data["password"],
        )
        if user is None or not user.is_active:
            return Response(
                {"detail": "Unable to sign in with the username and password given."},
                status=status.HTTP_400_BAD_REQUEST,
            )
        token, raw = api_token_create(user=user)
        out = TokenOutput({"token": raw, "prefix": token.prefix, "username": user.get_username()})
        return Response(out.data, status=status.HTTP_201_CREATED)

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
