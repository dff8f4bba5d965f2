"""The single sign-on settings at start: the ways in they configure, and a process that will
not start on a mistake, naming it."""

from __future__ import annotations

from tests.integration.portal.test_settings import run, setting


def test_the_environment_chooses_the_ways_in():
    env = {"ALLOT_LOCAL_PASSWORDS": "false", "ALLOT_OIDC_CLIENT_ID": "allot",
           "ALLOT_OIDC_ISSUER": "https://id.example.org/realms/org/",
           "ALLOT_LDAP_SERVER_URI": "ldap://ldap.example.org",
           "ALLOT_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,ou=people,dc=example,dc=org"}
    assert setting("AUTHENTICATION_BACKENDS", **env) == (
        "['portal.sso.ldap.LimitedLDAPBackend', 'portal.sso.oidc.OidcBackend']")


def fails(**env: str) -> str:
    done = run(["manage.py", "check"], **env)
    assert done.returncode != 0
    return done.stderr.strip().splitlines()[-1]


def test_a_mistake_stops_the_process_naming_it():
    assert fails(ALLOT_LOCAL_PASSWORDS="false") == (
        "django.core.exceptions.ImproperlyConfigured: ALLOT_LOCAL_PASSWORDS=false with neither "
        "ALLOT_OIDC_CLIENT_ID nor ALLOT_LDAP_SERVER_URI set: nobody could sign in")
    assert fails(ALLOT_SSO_GROUP_TEAMS="gpu=vision:boss").endswith(
        "ALLOT_SSO_GROUP_TEAMS: in 'gpu=vision:boss' the role 'boss' is not one of "
        "researcher, lead")
    assert fails(ALLOT_OIDC_CLIENT_ID="allot").endswith(
        "ALLOT_OIDC_CLIENT_ID is set but ALLOT_OIDC_ISSUER is not: every ID token is checked "
        "against the issuer, and its discovery document names the endpoints not given")
