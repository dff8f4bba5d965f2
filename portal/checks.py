"""Deployment checks of our own (`manage.py check --deploy`): what Django's cannot know."""

from typing import Any

from django.conf import settings
from django.core import checks

# Hashers fast enough to guess passwords by the billion (tests/settings.py puts MD5 first).
WEAK_HASHERS = {
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.UnsaltedMD5PasswordHasher",
    "django.contrib.auth.hashers.UnsaltedSHA1PasswordHasher",
    "django.contrib.auth.hashers.SHA1PasswordHasher",
    "django.contrib.auth.hashers.CryptPasswordHasher",
}
# Caches each process keeps apart: the sign-in limit would count per process.
UNSHARED_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
}


@checks.register(checks.Tags.security, deploy=True)
def check_password_hashers(**kwargs: Any) -> list[checks.CheckMessage]:
    """A weak hasher in PASSWORD_HASHERS signs people in (and the first one hashes)."""
    weak = [h for h in settings.PASSWORD_HASHERS if h in WEAK_HASHERS]
    if not weak:
        return []
    return [checks.Warning(
        f"PASSWORD_HASHERS holds weak hashers: {', '.join(weak)}",
        hint="Use PBKDF2, Argon2 or scrypt only (the default); MD5 is for the tests.",
        id="allot.W001")]


@checks.register(checks.Tags.caches, deploy=True)
def check_shared_cache(**kwargs: Any) -> list[checks.CheckMessage]:
    """The sign-in limit's counters must be shared by every web process."""
    backend = settings.CACHES.get("default", {}).get("BACKEND", "")
    if backend not in UNSHARED_CACHES:
        return []
    return [checks.Warning(
        f"the default cache ({backend}) is not shared between processes: each would count "
        "failed sign-ins on its own",
        hint="Set CACHE_URL or REDIS_URL (e.g. redis://127.0.0.1:6379/1).",
        id="allot.W002")]


@checks.register(checks.Tags.security, deploy=True)
def check_sso_transport(**kwargs: Any) -> list[checks.CheckMessage]:
    """Single sign-on over plain HTTP or LDAP lets anyone on the way read what vouches for a
    user: the provider's tokens, the directory's passwords."""
    found: list[checks.CheckMessage] = []
    issuer = getattr(settings, "ALLOT_OIDC_ISSUER", "")
    if settings.OIDC_RP_CLIENT_ID and issuer.startswith("http://"):
        found.append(checks.Warning(
            f"ALLOT_OIDC_ISSUER is {issuer}: the identity provider is reached over plain HTTP",
            hint="Use the provider's https:// issuer.", id="allot.W003"))
    uri = getattr(settings, "AUTH_LDAP_SERVER_URI", "")
    if uri and uri.startswith("ldap://") and not getattr(settings, "AUTH_LDAP_START_TLS", False):
        found.append(checks.Warning(
            f"ALLOT_LDAP_SERVER_URI is {uri} without ALLOT_LDAP_START_TLS: passwords cross the "
            "network in clear",
            hint="Use ldaps:// or set ALLOT_LDAP_START_TLS=true.", id="allot.W004"))
    return found
