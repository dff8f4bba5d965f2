"""The single sign-on settings at start: the ways in they configure, and a process that will
not start on a mistake, naming it."""

from __future__ import annotations

from django.test import override_settings

from portal.checks import check_sso_transport
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


def test_check_deploy_names_single_sign_on_in_clear():
    with override_settings(OIDC_RP_CLIENT_ID="allot", ALLOT_OIDC_ISSUER="http://id.example.org",
                           AUTH_LDAP_SERVER_URI="ldap://ldap.example.org",
                           AUTH_LDAP_START_TLS=False):
        found = {m.id: m.msg for m in check_sso_transport()}
    assert found == {
        "allot.W003": "ALLOT_OIDC_ISSUER is http://id.example.org: the identity provider is "
                      "reached over plain HTTP",
        "allot.W004": "ALLOT_LDAP_SERVER_URI is ldap://ldap.example.org without "
                      "ALLOT_LDAP_START_TLS: passwords cross the network in clear"}
    with override_settings(OIDC_RP_CLIENT_ID="allot", ALLOT_OIDC_ISSUER="https://id.example.org",
                           AUTH_LDAP_SERVER_URI="ldap://ldap.example.org",
                           AUTH_LDAP_START_TLS=True):
        assert check_sso_transport() == []
    with override_settings(AUTH_LDAP_SERVER_URI="ldaps://ldap.example.org"):
        assert check_sso_transport() == []
