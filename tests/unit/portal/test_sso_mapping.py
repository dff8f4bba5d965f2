"""The group mapping of single sign-on (portal/sso/mapping.py) and the LDAP settings
(portal/sso/ldap_settings.py): what they accept, and the message naming what is wrong."""

from __future__ import annotations

import environ
import pytest
from django.core.exceptions import ImproperlyConfigured
from django_auth_ldap.config import LDAPSearch, PosixGroupType

from portal.sso.ldap_settings import ldap_settings
from portal.sso.mapping import (
    ROLES,
    GroupRule,
    managed_teams,
    parse_group_teams,
    parse_groups,
    team_roles,
)
from quotas.models import TeamRole


def test_roles_are_the_team_roles():
    assert set(ROLES) == set(TeamRole.values)


def test_entries_split_at_the_last_equals_sign():
    rules = parse_group_teams(
        " gpu-vision = vision ;GPU-Vision-Leads=vision:lead\n\n"
        "cn=nlp,ou=groups,dc=example,dc=org=nlp:researcher;", "X")
    assert rules == (GroupRule("gpu-vision", "vision", "researcher"),
                     GroupRule("gpu-vision-leads", "vision", "lead"),
                     GroupRule("cn=nlp,ou=groups,dc=example,dc=org", "nlp", "researcher"))
    assert parse_group_teams("", "X") == () and parse_group_teams(" ; \n", "X") == ()
    assert managed_teams(rules) == {"vision", "nlp"}


@pytest.mark.parametrize(("raw", "message"), [
    ("gpu-vision", "ALLOT_SSO_GROUP_TEAMS: 'gpu-vision' is not GROUP=TEAM[:ROLE] "
                   "(e.g. gpu-vision=vision:lead)"),
    ("=vision", "ALLOT_SSO_GROUP_TEAMS: '=vision' is not GROUP=TEAM[:ROLE]"),
    ("a=vision:boss", "ALLOT_SSO_GROUP_TEAMS: in 'a=vision:boss' the role 'boss' is not one "
                      "of researcher, lead"),
    ("a=rd/vision", "ALLOT_SSO_GROUP_TEAMS: in 'a=rd/vision' the team 'rd/vision' is not a "
                    "team name (letters, digits, - and _, at most 63)"),
    ("ok=vision; a=", "in 'a=' the team '' is not a team name"),
])
def test_a_bad_entry_is_named(raw, message):
    with pytest.raises(ImproperlyConfigured) as caught:
        parse_group_teams(raw, "ALLOT_SSO_GROUP_TEAMS")
    assert message in str(caught.value)


def test_groups_give_roles_with_lead_first_and_without_regard_to_case():
    rules = parse_group_teams("a=vision; b=vision:lead; c=nlp; d=ops:lead", "X")
    assert team_roles(rules, ["B", "a", "C", "unmapped"]) == {"vision": "lead",
                                                              "nlp": "researcher"}
    assert team_roles(rules, ["a"]) == {"vision": "researcher"}
    assert team_roles(rules, []) == {}
    assert parse_groups("Allot-Admins; cn=admins,ou=groups,dc=org\n") == {
        "allot-admins", "cn=admins,ou=groups,dc=org"}


def env(monkeypatch, **values: str) -> environ.Env:
    for name in ("ALLOT_LDAP_USER_DN_TEMPLATE", "ALLOT_LDAP_USER_SEARCH_BASE",
                 "ALLOT_LDAP_GROUP_SEARCH_BASE", "ALLOT_SSO_GROUP_TEAMS",
                 "ALLOT_SSO_ADMIN_GROUPS", "ALLOT_LDAP_BIND_DN", "ALLOT_LDAP_GROUP_TYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALLOT_LDAP_SERVER_URI", "ldaps://ldap.example.org")
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return environ.Env()


def test_ldap_settings_for_a_search_with_posix_groups(monkeypatch):
    out = ldap_settings(env(monkeypatch, ALLOT_LDAP_USER_SEARCH_BASE="ou=people,dc=org",
                            ALLOT_LDAP_BIND_DN="cn=allot,dc=org",
                            ALLOT_LDAP_GROUP_SEARCH_BASE="ou=groups,dc=org",
                            ALLOT_LDAP_GROUP_TYPE="posixGroup"))
    assert out["AUTH_LDAP_SERVER_URI"] == "ldaps://ldap.example.org"
    assert isinstance(out["AUTH_LDAP_USER_SEARCH"], LDAPSearch)
    assert out["AUTH_LDAP_USER_SEARCH"].filterstr == "(uid=%(user)s)"
    assert isinstance(out["AUTH_LDAP_GROUP_TYPE"], PosixGroupType)
    assert out["AUTH_LDAP_GROUP_SEARCH"].filterstr == "(objectClass=posixGroup)"
    assert out["AUTH_LDAP_BIND_AS_AUTHENTICATING_USER"] is False
    assert "AUTH_LDAP_USER_DN_TEMPLATE" not in out


@pytest.mark.parametrize(("values", "message"), [
    ({}, "set one of ALLOT_LDAP_USER_DN_TEMPLATE (e.g. uid=%(user)s,ou=people,dc=example,"
         "dc=org) and ALLOT_LDAP_USER_SEARCH_BASE (with ALLOT_LDAP_USER_FILTER, default "
         "(uid=%(user)s)), not neither"),
    ({"ALLOT_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,dc=org",
      "ALLOT_LDAP_USER_SEARCH_BASE": "dc=org"}, "not both"),
    ({"ALLOT_LDAP_USER_DN_TEMPLATE": "uid=dana,dc=org"},
     "ALLOT_LDAP_USER_DN_TEMPLATE='uid=dana,dc=org' has no %(user)s"),
    ({"ALLOT_LDAP_USER_SEARCH_BASE": "dc=org", "ALLOT_LDAP_USER_FILTER": "(uid=*)"},
     "ALLOT_LDAP_USER_FILTER='(uid=*)' has no %(user)s"),
    ({"ALLOT_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,dc=org", "ALLOT_LDAP_GROUP_TYPE": "unix"},
     "ALLOT_LDAP_GROUP_TYPE='unix': one of groupOfNames, groupOfUniqueNames, posixGroup, "
     "activeDirectory"),
    ({"ALLOT_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,dc=org", "ALLOT_SSO_ADMIN_GROUPS": "admins"},
     "ALLOT_LDAP_GROUP_SEARCH_BASE is not: the groups could not be found"),
])
def test_ldap_settings_name_what_is_wrong(monkeypatch, values, message):
    with pytest.raises(ImproperlyConfigured) as caught:
        ldap_settings(env(monkeypatch, **values))
    assert message in str(caught.value)
