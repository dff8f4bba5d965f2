"""Writes of single sign-on: a signed-in user's teams, roles and admin flags, kept in step with
their groups at each sign-in."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models, transaction

from portal.sso.mapping import managed_teams, team_roles
from quotas.models import Team, TeamMembership

logger = logging.getLogger(__name__)


@dataclass
class SyncResult:
    """What one sign-in changed: memberships added, roles changed, memberships removed (team
    names), admin granted or taken away (None: unchanged), mapped teams that do not exist."""

    added: dict[str, str] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    admin: bool | None = None
    missing_teams: list[str] = field(default_factory=list)


@transaction.atomic
def sso_user_sync(*, user: Any, groups: Iterable[str], source: str) -> SyncResult:
    """Give the user the memberships and roles their groups name in ALLOT_SSO_GROUP_TEAMS
    (removing memberships of mapped teams no group names; other teams are left alone) and, when
    ALLOT_SSO_ADMIN_GROUPS is set, make them a platform admin or not. `source` (oidc, ldap)
    is only logged."""
    # One sign-in of a user at a time: two at once would both add the same membership.
    type(user).objects.select_for_update().filter(pk=user.pk).first()
    groups = {g.casefold() for g in groups}
    rules = settings.ALLOT_SSO_GROUP_TEAMS
    result = SyncResult()
    wanted = team_roles(rules, groups)
    managed = managed_teams(rules)
    teams = {t.name: t for t in Team.objects.filter(name__in=managed)}
    result.missing_teams = sorted(managed - teams.keys())
    held = {m.team.name: m for m in TeamMembership.objects.select_related("team").filter(
        user=user, team__in=teams.values())}
    for name, team in sorted(teams.items()):
        membership, role = held.get(name), wanted.get(name)
        if role is None and membership is not None:
            membership.delete()
            result.removed.append(name)
        elif role is not None and membership is None:
            TeamMembership.objects.create(team=team, user=user, role=role)
            result.added[name] = role
        elif role is not None and membership is not None and membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
            result.changed[name] = role
    if settings.ALLOT_SSO_ADMIN_GROUPS:
        admin = bool(groups & settings.ALLOT_SSO_ADMIN_GROUPS)
        if (user.is_staff, user.is_superuser) != (admin, admin):
            user.is_staff = user.is_superuser = admin
            user.save(update_fields=["is_staff", "is_superuser"])
            result.admin = admin
    _log(user, source, result)
    return result


def _log(user: Any, source: str, result: SyncResult) -> None:
    for team in result.missing_teams:
        logger.warning("%s sign-in of %s: the team %r of ALLOT_SSO_GROUP_TEAMS does not exist; "
                       "create it or correct the mapping", source, user.get_username(), team)
    changes = [f"joined {t} as {r}" for t, r in result.added.items()]
    changes += [f"now {r} in {t}" for t, r in result.changed.items()]
    changes += [f"left {t}" for t in result.removed]
    if result.admin is not None:
        changes.append("made a platform admin" if result.admin else "no longer a platform admin")
    if changes:
        logger.info("%s sign-in of %s: %s", source, user.get_username(), "; ".join(changes))


class SignInRefused(Exception):
    """A sign-in the provider vouched for that Allot refuses; the message says why."""


@transaction.atomic
def sso_user_sign_in(*, username: str, profile: dict[str, str], groups: Iterable[str],
                     source: str) -> Any:
    """The user `username` (created on first sign-in, with no usable password), with the
    profile's email and names brought up to date and their teams and roles synced to
    `groups`; SignInRefused if the username is not a valid one or the account is
    deactivated."""
    model = get_user_model()
    field = model._meta.get_field(model.USERNAME_FIELD)
    assert isinstance(field, models.Field)
    try:
        field.run_validators(username)
    except ValidationError as exc:
        raise SignInRefused(
            f"the username {username!r} is not a valid one ({' '.join(exc.messages)})"
        ) from exc
    user = model.objects.filter(**{model.USERNAME_FIELD: username}).first()
    if user is None:
        user = model(**{model.USERNAME_FIELD: username}, **profile)
        user.set_unusable_password()
        user.save()
        logger.info("%s sign-in: user %s created", source, username)
    elif not user.is_active:
        raise SignInRefused(f"the account {username!r} is deactivated in Allot; an admin can "
                            "reactivate it")
    else:
        stale = [name for name, value in profile.items() if getattr(user, name) != value]
        if stale:
            for name in stale:
                setattr(user, name, profile[name])
            user.save(update_fields=stale)
    sso_user_sync(user=user, groups=groups, source=source)
    return user
