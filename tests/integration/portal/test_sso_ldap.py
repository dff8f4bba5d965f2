"""Sign-in against an LDAP directory (a real slapd started by each test, loaded from an LDIF):
the user is created on first sign-in from their entry; their teams, roles and admin flags
follow their directory groups at each sign-in; the sign-in limit holds for directory
passwords; with local passwords off the directory still signs people in; a directory that
fails is named and not counted as a wrong password."""

from __future__ import annotations

import environ
import ldap
import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings
from rest_framework.test import APIClient

from portal.models import ApiToken
from portal.sso.ldap import LimitedLDAPBackend
from portal.sso.ldap_settings import ldap_settings
from portal.sso.mapping import parse_group_teams, parse_groups
from portal.sso.options import LDAP_BACKEND, LOCAL_BACKEND
from quotas.models import Team, TeamMembership, TeamRole
from tests.factories import PASSWORD, UserFactory
from tests.integration.portal.sso_servers import (
    ROOT_DN,
    ROOT_PASSWORD,
    SUFFIX,
    free_port,
    group,
    ldap_directory,
    person,
    slapd_binary,
)

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(slapd_binary() is None, reason="slapd is not installed (Debian package "
                       "slapd; scripts/ensure_system_packages.sh installs it)"),
]

ENTRIES = [
    person("dana", "Dana", "Scully", "dana-pass"),
    person("fox", "Fox", "Mulder", "fox-pass"),
    group("vision-leads", "dana"),
    group("gpu-nlp", "dana", "fox"),
    group("allot-admins", "dana"),
]
# One group by name, one by its DN (split from the team at the last `=`).
MAPPING = f"vision-leads=vision:lead; cn=gpu-nlp,ou=groups,{SUFFIX}=nlp"


@pytest.fixture
def directory():
    with ldap_directory(ENTRIES) as running:
        yield running


def directory_settings(monkeypatch, uri: str, backends=(LOCAL_BACKEND, LDAP_BACKEND),
                       **environment: str):
    """The settings ALLOT_LDAP_* give (through portal/sso/ldap_settings.py, as at start)."""
    monkeypatch.setenv("ALLOT_LDAP_SERVER_URI", uri)
    monkeypatch.setenv("ALLOT_LDAP_GROUP_SEARCH_BASE", f"ou=groups,{SUFFIX}")
    if "ALLOT_LDAP_USER_SEARCH_BASE" not in environment:
        monkeypatch.setenv("ALLOT_LDAP_USER_DN_TEMPLATE", f"uid=%(user)s,ou=people,{SUFFIX}")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return override_settings(
        AUTHENTICATION_BACKENDS=list(backends),
        ALLOT_SSO_GROUP_TEAMS=parse_group_teams(MAPPING, "ALLOT_SSO_GROUP_TEAMS"),
        ALLOT_SSO_ADMIN_GROUPS=parse_groups("allot-admins"),
        **ldap_settings(environ.Env()))


@pytest.fixture
def teams(db):
    return {name: Team.objects.create(name=name) for name in ("vision", "nlp")}


def roles(user) -> dict[str, str]:
    return dict(TeamMembership.objects.filter(user=user).values_list("team__name", "role"))


def page_try(username, password, address="10.1.0.1"):
    return Client().post("/login/", {"username": username, "password": password},
                         REMOTE_ADDR=address)


def api_try(username, password, address="10.1.0.1"):
    return APIClient().post("/api/v1/auth/token", {"username": username, "password": password},
                            format="json", REMOTE_ADDR=address)


def test_first_sign_in_creates_the_user_from_the_directory(directory, teams, monkeypatch):
    with directory_settings(monkeypatch, directory.uri):
        response = page_try("dana", "dana-pass")
    assert response.status_code == 302, response.content
    dana = get_user_model().objects.get(username="dana")
    assert response.client.session["_auth_user_id"] == str(dana.pk)
    assert (dana.first_name, dana.last_name, dana.email) == ("Dana", "Scully",
                                                             "dana@allot.test")
    assert not dana.has_usable_password()
    assert roles(dana) == {"vision": TeamRole.LEAD, "nlp": TeamRole.RESEARCHER}
    assert dana.is_staff and dana.is_superuser


def test_groups_changed_in_the_directory_change_teams_at_the_next_sign_in(
        directory, teams, monkeypatch):
    with directory_settings(monkeypatch, directory.uri):
        response = api_try("dana", "dana-pass")
        assert response.status_code == 201 and response.json()["username"] == "dana"
        dana = get_user_model().objects.get(username="dana")
        assert ApiToken.objects.filter(user=dana).count() == 1
        for cn in ("vision-leads", "allot-admins"):
            directory.modify(f"cn={cn},ou=groups,{SUFFIX}", [
                (ldap.MOD_REPLACE, "member", [f"uid=fox,ou=people,{SUFFIX}".encode()])])
        assert api_try("dana", "dana-pass").status_code == 201
    dana.refresh_from_db()
    assert roles(dana) == {"nlp": TeamRole.RESEARCHER}
    assert not dana.is_staff and not dana.is_superuser


def test_users_found_by_a_search_with_a_service_account(directory, teams, monkeypatch):
    with directory_settings(monkeypatch, directory.uri,
                            ALLOT_LDAP_USER_SEARCH_BASE=f"ou=people,{SUFFIX}",
                            ALLOT_LDAP_BIND_DN=ROOT_DN, ALLOT_LDAP_BIND_PASSWORD=ROOT_PASSWORD):
        assert page_try("fox", "fox-pass").status_code == 302
        assert page_try("fox", "not-fox").status_code == 200  # the form again, with its error
    fox = get_user_model().objects.get(username="fox")
    assert roles(fox) == {"nlp": TeamRole.RESEARCHER} and not fox.is_staff


def test_the_sign_in_limit_holds_for_directory_passwords(directory, teams, monkeypatch):
    binds = []
    real = LimitedLDAPBackend.authenticate_ldap_user
    monkeypatch.setattr(LimitedLDAPBackend, "authenticate_ldap_user",
                        lambda self, *a: binds.append(1) or real(self, *a))
    with directory_settings(monkeypatch, directory.uri):
        codes = [api_try("dana", "guess", address=f"10.1.1.{i}").status_code
                 for i in range(12)]
        assert codes == [400] * 10 + [429] * 2
        assert len(binds) == 10  # refused guesses never reach the directory
        response = api_try("dana", "dana-pass", address="10.1.2.1")
        assert response.status_code == 429 and 1 <= int(response["Retry-After"]) <= 300
        assert page_try("dana", "dana-pass", address="10.1.2.2").status_code == 429
        assert page_try("fox", "fox-pass", address="10.1.2.2").status_code == 302
    assert not get_user_model().objects.filter(username="dana").exists()


def test_with_local_passwords_off_the_directory_still_signs_in(directory, teams, monkeypatch):
    UserFactory(username="olive")  # a local account with a password
    with directory_settings(monkeypatch, directory.uri, backends=[LDAP_BACKEND]):
        page = Client().get("/login/").content.decode()
        assert 'name="password"' in page and "Sign in with" not in page
        assert page_try("olive", PASSWORD).status_code == 200  # not a directory password
        assert api_try("olive", PASSWORD).status_code == 400
        assert page_try("fox", "fox-pass").status_code == 302


def test_a_directory_that_fails_is_named_and_not_counted(teams, monkeypatch):
    uri = f"ldap://127.0.0.1:{free_port()}"  # nothing listens there
    with directory_settings(monkeypatch, uri):
        response = page_try("dana", "dana-pass")
        assert response.status_code == 503
        expected = (f"Signing in failed: the directory ({uri}) could not check the password: "
                    "Can&#x27;t contact LDAP server; try again later, or tell an admin if it "
                    "lasts.")
        assert expected in response.content.decode()
        codes = [api_try("dana", "dana-pass").status_code for _ in range(12)]
        assert codes == [503] * 12  # not 429: the directory failed, not the password
        assert api_try("dana", "dana-pass").json()["detail"] == expected.replace(
            "&#x27;", "'")
        # A local account still signs in with its own password meanwhile.
        UserFactory(username="pat")
        assert page_try("pat", PASSWORD).status_code == 302
