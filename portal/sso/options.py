"""Which ways of signing in this site offers, read from AUTHENTICATION_BACKENDS (built from
ALLOT_LOCAL_PASSWORDS, ALLOT_LDAP_SERVER_URI and ALLOT_OIDC_CLIENT_ID in portal/settings.py):
what the sign-in page shows and what the token API accepts."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

LOCAL_BACKEND = "portal.login_limits.LimitedModelBackend"
LDAP_BACKEND = "portal.sso.ldap.LimitedLDAPBackend"
OIDC_BACKEND = "portal.sso.oidc.OidcBackend"


@dataclass(frozen=True)
class SignInOptions:
    """Passwords checked locally, by the LDAP directory; OpenID Connect and its button."""

    local: bool
    directory: bool
    oidc: bool
    oidc_name: str

    @property
    def passwords(self) -> bool:
        """Whether a username and password can sign anyone in."""
        return self.local or self.directory

    def passwords_off(self) -> str:
        """Why a password is refused, and what to do instead."""
        return ("Signing in with a password is turned off on this site: sign in with "
                f"{self.oidc_name} in a browser (/oidc/authenticate/), then create an API token "
                "on /account/tokens/ (or POST /api/v1/auth/tokens with that session).")


def sign_in_options() -> SignInOptions:
    """The ways of signing in configured now."""
    backends = settings.AUTHENTICATION_BACKENDS
    return SignInOptions(
        local=LOCAL_BACKEND in backends,
        directory=LDAP_BACKEND in backends,
        oidc=OIDC_BACKEND in backends and bool(settings.OIDC_RP_CLIENT_ID),
        oidc_name=settings.ALLOT_OIDC_NAME)
