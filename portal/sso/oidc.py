"""Sign-in with OpenID Connect (mozilla-django-oidc): the authorization-code flow with PKCE and
a nonce, the ID token's signature checked against the provider's JWKS, its issuer, audience
and expiry checked too. Settings from ALLOT_OIDC_* (portal/settings.py, docs/sso.md).

The user is named by one claim (ALLOT_OIDC_USERNAME_CLAIM, `preferred_username`), created on
first sign-in, and at each sign-in their teams, roles and admin flags follow the groups claim
(ALLOT_OIDC_GROUPS_CLAIM, `groups`; `services.sso_user_sign_in`). Claims are the ID token's,
with the userinfo endpoint's over them when the provider has one.

The endpoints not given in the settings come from the issuer's discovery document, read once
per process when a sign-in first needs them (never at start, nor for a password sign-in). A
sign-in that fails says why on the sign-in page: the provider's refusal, a provider that did
not answer, an ID token that failed a check, a claim Allot cannot use.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.core.validators import validate_email
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from portal.sso.options import sign_in_options
from portal.sso.outcome import note_error, noted_error
from portal.sso.services import SignInRefused, sso_user_sign_in

logger = logging.getLogger(__name__)

_ABSENT = object()


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or does not fit the settings."""


@dataclass(frozen=True)
class Provider:
    """Where the provider's endpoints are (userinfo may be empty: claims of the ID token)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str


def enabled() -> bool:
    """Whether OpenID Connect sign-in is configured (ALLOT_OIDC_CLIENT_ID)."""
    return sign_in_options().oidc


@functools.lru_cache(maxsize=4)
def _discover(issuer: str, timeout: float) -> dict[str, Any]:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=timeout)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"the identity provider's discovery document ({url}) could "
                                  f"not be read: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} is not a discovery document (not a JSON object)")
    found = str(document.get("issuer", "")).rstrip("/")
    if found != issuer:
        raise ProviderUnavailable(f"{url} names the issuer {found!r}, not ALLOT_OIDC_ISSUER "
                                  f"{issuer!r}")
    return document


def provider() -> Provider:
    """The provider's endpoints: those given in ALLOT_OIDC_*, the others discovered (once per
    process; a failure is not remembered, so the next sign-in tries again)."""
    given = settings.ALLOT_OIDC_ENDPOINTS
    needed = ("authorization_endpoint", "token_endpoint", "jwks_uri")
    found = dict(given)
    if not all(given[name] for name in needed):
        document = _discover(settings.ALLOT_OIDC_ISSUER, settings.OIDC_TIMEOUT)
        for name, value in given.items():
            found[name] = value or str(document.get(name) or "")
        missing = [name for name in needed if not found[name]]
        if missing:
            raise ProviderUnavailable(
                f"the identity provider's discovery document has no {', '.join(missing)}; "
                f"set ALLOT_OIDC_{missing[0].upper()}")
    return Provider(issuer=settings.ALLOT_OIDC_ISSUER, **found)


def claim(claims: dict[str, Any], name: str) -> Any:
    """The claim `name`, or, when there is none of that name, the one at the dotted path
    (`realm_access.roles`); _ABSENT when neither is there."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def groups_of(claims: dict[str, Any]) -> list[str]:
    """The group names in the groups claim (a list of names, or one name); an absent claim
    is no groups (logged: a provider sends none for a user in no group, or when it was not
    asked to)."""
    name = settings.ALLOT_OIDC_GROUPS_CLAIM
    value = claim(claims, name)
    if value is _ABSENT or value is None:
        logger.warning("oidc sign-in of %s: no %r claim; taken as no groups",
                       claims.get("sub"), name)
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise SignInRefused(f"the {name!r} claim is a {type(value).__name__} "
                        f"({str(value)[:80]}), not a list of group names; "
                        "set ALLOT_OIDC_GROUPS_CLAIM to the claim that lists them")


def profile_of(claims: dict[str, Any]) -> dict[str, str]:
    """Email and names from the standard claims, those that fit the user's fields."""
    out: dict[str, str] = {}
    email = claims.get("email")
    if isinstance(email, str) and len(email) <= 254:
        try:
            validate_email(email)
            out["email"] = email
        except ValidationError:
            pass
    for field, name in (("first_name", "given_name"), ("last_name", "family_name")):
        if isinstance(claims.get(name), str):
            out[field] = claims[name][:150]
    return out


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend: endpoints found lazily, the ID token's issuer and
    audience checked, users named by ALLOT_OIDC_USERNAME_CLAIM and their teams synced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django builds every backend for each authenticate() and each session's user: none of
        # that may reach the provider, so the endpoints are properties read when used.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute
        return provider().token_endpoint

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return provider().userinfo_endpoint

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return provider().jwks_uri

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        # Only the callback view's call (it passes the nonce); a password sign-in is not ours.
        if request is None or "nonce" not in kwargs or not enabled():
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (SignInRefused, ProviderUnavailable) as exc:
            reason = str(exc)
        except (SuspiciousOperation, jwt.InvalidTokenError) as exc:
            reason = f"the ID token was refused: {exc}"
        except requests.RequestException as exc:
            reason = f"the identity provider did not answer as expected: {exc}"
        logger.warning("oidc sign-in failed: %s", reason)
        note_error(request, reason)
        return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload = super().verify_token(token, **kwargs)
        issuer = settings.ALLOT_OIDC_ISSUER
        if str(payload.get("iss", "")).rstrip("/") != issuer:
            raise SuspiciousOperation(
                f"its issuer {payload.get('iss')!r} is not ALLOT_OIDC_ISSUER {issuer!r}")
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation(
                f"its audience {audience!r} does not include this client "
                f"({self.OIDC_RP_CLIENT_ID!r}, ALLOT_OIDC_CLIENT_ID)")
        return payload

    def retrieve_matching_jwk(self, token: str) -> jwt.PyJWK:
        # The library's requires a `kid` in the token's header; a provider with one key may
        # send none, and then that key is the one.
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        header = jwt.get_unverified_header(token)
        keys = [k for k in response.json().get("keys", [])
                if k.get("use", "sig") == "sig"
                and ("kid" not in header or k.get("kid") == header["kid"])
                and k.get("alg", header.get("alg")) == header.get("alg")]
        if len(keys) != 1:
            raise SuspiciousOperation(
                f"the provider's JWKS has {len(keys)} signing keys for its key id "
                f"{header.get('kid')!r} and algorithm {header.get('alg')!r}, not one")
        return jwt.PyJWK(keys[0])

    def get_userinfo(self, access_token: str, id_token: str,
                     payload: dict[str, Any]) -> dict[str, Any]:
        claims = dict(payload)
        if provider().userinfo_endpoint:
            info = super().get_userinfo(access_token, id_token, payload)
            if info.get("sub") != payload.get("sub"):
                raise SignInRefused(f"the userinfo endpoint answered for the subject "
                                    f"{info.get('sub')!r}, not the ID token's "
                                    f"{payload.get('sub')!r}")
            claims.update(info)
        return claims

    def get_or_create_user(self, access_token: str, id_token: str,
                           payload: dict[str, Any]) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        name = settings.ALLOT_OIDC_USERNAME_CLAIM
        username = claim(claims, name)
        if not isinstance(username, str) or not username:
            raise SignInRefused(
                f"the identity provider sent no {name!r} claim to name the user (it sent "
                f"{', '.join(sorted(claims))}); set ALLOT_OIDC_USERNAME_CLAIM to one of them")
        return sso_user_sign_in(username=username, profile=profile_of(claims),
                                groups=groups_of(claims), source="oidc")


def _to_login(request: HttpRequest, reason: str) -> HttpResponse:
    messages.error(request, f"Single sign-on failed: {reason.rstrip('.')}.")
    return HttpResponseRedirect(resolve_url(settings.LOGIN_URL))


class AuthenticateView(OIDCAuthenticationRequestView):
    """Start a sign-in: redirect to the provider (404 when OpenID Connect is off)."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the library's reads the endpoint here: see below
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    @property
    def OIDC_OP_AUTH_ENDPOINT(self) -> str:  # noqa: N802 - the library's attribute
        return provider().authorization_endpoint

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured")
        try:
            provider()
        except ProviderUnavailable as exc:
            logger.warning("oidc sign-in not started: %s", exc)
            return _to_login(request, str(exc))
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back: sign the user in, or say on the sign-in page why not."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("single sign-on is not configured")
        try:
            return super().get(request)
        except SuspiciousOperation:  # a state this browser's session never issued
            return _to_login(request, "this answer of the identity provider belongs to no "
                                      "sign-in started in this browser (or was used already); "
                                      "sign in again")

    def login_failure(self) -> HttpResponse:
        request = self.request
        reason = noted_error(request)
        if reason is None and request.GET.get("error"):
            reason = f"the identity provider refused: {request.GET['error']}"
            if request.GET.get("error_description"):
                reason += f" ({request.GET['error_description']})"
        if reason is None:
            reason = ("the sign-in was not completed (it began too long ago or in another "
                      "browser); sign in again")
        return _to_login(request, reason)
