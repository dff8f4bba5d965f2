"""The group mapping of single sign-on, read from the environment by portal/settings.py.

`ALLOT_SSO_GROUP_TEAMS` holds entries `GROUP=TEAM[:ROLE]` separated by `;` or new lines: a
member of GROUP belongs to TEAM with ROLE (`researcher`, the default, or `lead`). A group is
split from its team at the last `=`, so an LDAP group's DN (`cn=vision,ou=groups,dc=org`)
may be written whole. `ALLOT_SSO_ADMIN_GROUPS` lists the groups whose members are platform
admins, separated the same way. Groups are compared without regard to case.

Plain Python (no Django models): the settings module imports it, and a mistake in either
setting stops the process at start with a message naming the entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

# quotas.models.TeamRole's values (tests/unit/portal/test_sso_mapping.py holds them equal):
# the settings are read before the models can be imported.
ROLES = ("researcher", "lead")
DEFAULT_ROLE = "researcher"
_TEAM = re.compile(r"^[-a-zA-Z0-9_]{1,63}$")  # a Team.name (SlugField, 63)


@dataclass(frozen=True)
class GroupRule:
    """Members of `group` (casefolded) are in `team` with `role`."""

    group: str
    team: str
    role: str


def _entries(raw: str) -> list[str]:
    return [e.strip() for e in re.split(r"[;\n]", raw) if e.strip()]


def parse_group_teams(raw: str, name: str) -> tuple[GroupRule, ...]:
    """The rules of a `GROUP=TEAM[:ROLE]; ...` setting; ImproperlyConfigured names the first
    entry that is not of that form."""
    rules = []
    for entry in _entries(raw):
        group, sep, target = entry.rpartition("=")
        group, target = group.strip(), target.strip()
        if not sep or not group:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not GROUP=TEAM[:ROLE] (e.g. gpu-vision=vision:lead)")
        team, _, role = target.partition(":")
        team, role = team.strip(), role.strip() or DEFAULT_ROLE
        if not _TEAM.match(team):
            raise ImproperlyConfigured(
                f"{name}: in {entry!r} the team {team!r} is not a team name (letters, digits, "
                "- and _, at most 63)")
        if role not in ROLES:
            raise ImproperlyConfigured(
                f"{name}: in {entry!r} the role {role!r} is not one of {', '.join(ROLES)}")
        rules.append(GroupRule(group.casefold(), team, role))
    return tuple(rules)


def parse_groups(raw: str) -> frozenset[str]:
    """The groups of a `GROUP; GROUP` setting, casefolded."""
    return frozenset(e.casefold() for e in _entries(raw))


def team_roles(rules: Iterable[GroupRule], groups: Iterable[str]) -> dict[str, str]:
    """The role in each mapped team that the groups give (lead wins over researcher); teams
    none of the groups name are absent."""
    member_of = {g.casefold() for g in groups}
    out: dict[str, str] = {}
    for rule in rules:
        if rule.group in member_of and out.get(rule.team) != "lead":
            out[rule.team] = rule.role
    return out


def managed_teams(rules: Iterable[GroupRule]) -> set[str]:
    """The teams the mapping keeps in step with the groups (memberships of others are left
    alone)."""
    return {rule.team for rule in rules}
