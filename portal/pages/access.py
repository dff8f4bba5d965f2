"""Who may see and decide what: the permission rules shared by pages and API views.

Researchers see their teams' queues (and the workloads in them) only; leads decide for their
teams' queues inside their department; staff and superusers (platform admins) see and decide
everything. Ids outside a user's scope are answered with 404, never 403 (API.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied

from quotas.models import Queue, TeamMembership, TeamRole


def signed_in(user: User | AnonymousUser) -> User:
    """The signed-in user behind a request (views and API views that require a login)."""
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionDenied("sign in first")
    return user


def is_platform_admin(user: User | AnonymousUser) -> bool:
    """Platform admins: Django staff or superusers."""
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


@dataclass(frozen=True)
class Scope:
    """The queues a user may see (and submit to) and those they may decide for."""

    is_admin: bool
    # Leaf queues (or any queue) granted to the user's teams.
    team_queue_ids: frozenset[int]
    # Those queues, their subtrees, and their ancestors below the department: visible.
    visible_queue_ids: frozenset[int]
    # Queues the user decides for as a lead (admins: everything; see `can_decide`).
    decide_queue_ids: frozenset[int]

    def can_see_queue(self, queue_id: int) -> bool:
        return self.is_admin or queue_id in self.visible_queue_ids

    def can_submit_to(self, queue_id: int) -> bool:
        return self.is_admin or queue_id in self.team_queue_ids

    def can_decide(self, queue_id: int) -> bool:
        return self.is_admin or queue_id in self.decide_queue_ids

    @property
    def is_lead(self) -> bool:
        return bool(self.decide_queue_ids)


def _related(
    paths: Sequence[tuple[str, str | None]], all_queues: Sequence[tuple[int, str]]
) -> set[int]:
    """Ids of queues equal to, below, or above (but strictly inside the department) a path."""
    out: set[int] = set()
    for qid, qpath in all_queues:
        for team_path, dept_path in paths:
            if qpath == team_path or qpath.startswith(team_path + "/"):
                out.add(qid)
            elif team_path.startswith(qpath + "/") and (
                dept_path is None or qpath.startswith(dept_path + "/")
            ):
                out.add(qid)
    return out


def user_scope(user: User | AnonymousUser) -> Scope:
    """The user's scope, computed with two queries (the tree is small: hundreds of queues)."""
    admin = is_platform_admin(user)
    if not user.is_authenticated:
        return Scope(False, frozenset(), frozenset(), frozenset())
    rows = list(
        TeamMembership.objects.filter(user_id=user.pk)
        .values_list("role", "team__queues__id", "team__queues__path", "team__department__path")
    )
    team_ids = frozenset(r[1] for r in rows if r[1] is not None)
    if not rows:
        return Scope(admin, team_ids, frozenset(), frozenset())
    all_queues = list(Queue.objects.values_list("id", "path"))
    seen = [(r[2], r[3]) for r in rows if r[2] is not None]
    lead = [(r[2], r[3]) for r in rows if r[2] is not None and r[0] == TeamRole.LEAD]
    return Scope(
        is_admin=admin,
        team_queue_ids=team_ids,
        visible_queue_ids=frozenset(_related(seen, all_queues)),
        decide_queue_ids=frozenset(_related(lead, all_queues)),
    )


@dataclass(frozen=True)
class PlanScope:
    """The queues a user may try changes of in the capacity planner (what-if, trace replay,
    recommendations): every queue for admins; for a lead, their teams' queues and what is
    below them (never an ancestor: a department is decided by admins); nothing for others."""

    is_admin: bool
    queue_ids: frozenset[int]

    @property
    def allowed(self) -> bool:
        return self.is_admin or bool(self.queue_ids)

    def can_plan(self, queue_id: int) -> bool:
        return self.is_admin or queue_id in self.queue_ids


def plan_scope(user: User | AnonymousUser) -> PlanScope:
    """The user's planner scope (two queries for a non-admin, none for an admin)."""
    if is_platform_admin(user):
        return PlanScope(True, frozenset())
    if not user.is_authenticated:
        return PlanScope(False, frozenset())
    roots = {p for p in TeamMembership.objects.filter(
        user_id=user.pk, role=TeamRole.LEAD, team__queues__isnull=False).values_list(
        "team__queues__path", flat=True) if p}
    if not roots:
        return PlanScope(False, frozenset())
    ids = frozenset(qid for qid, path in Queue.objects.values_list("id", "path")
                    if any(path == r or path.startswith(r + "/") for r in roots))
    return PlanScope(False, ids)


def may_plan(user: User | AnonymousUser) -> bool:
    """Whether the capacity planner's pages (what-if, trace replay, recommendations) are open
    to the user: admins, and leads of a team with queues (one query; what each page shows is
    still limited to the queues they decide for)."""
    if is_platform_admin(user):
        return True
    if not user.is_authenticated:
        return False
    return TeamMembership.objects.filter(user_id=user.pk, role=TeamRole.LEAD,
                                         team__queues__isnull=False).exists()
