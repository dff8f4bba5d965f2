"""What a submission reads besides its input: the user's leaf queues, teams, priority classes
and flavors, cached per request (and on the change log between requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection

from core.db import hot_cursor
from quotas.models import Flavor, Queue, Team
from scheduling.models import (
    PriorityClass,
)

Grant = tuple[Team, bool]  # a team granted a queue, and whether the submitting user is in it


def user_leaf_queues(user: Any) -> Any:
    """The leaf queues `user` may submit to (admins: every leaf; a team's queue covers the
    leaves below it)."""
    from quotas.selectors import submittable_queue_ids

    leaves = Queue.objects.filter(children__isnull=True)
    if user.is_staff or user.is_superuser:
        return leaves
    return leaves.filter(pk__in=submittable_queue_ids(user))


def _ancestor_paths(path: str) -> list[str]:
    """`path` and its ancestors, nearest first."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _team_from(grants: Mapping[str, list[Grant]], path: str) -> Team | None:
    """The team a workload on leaf `path` is accounted to: the user's team granted this leaf or
    an ancestor (else any team granted it, for admins submitting on a team's behalf); the
    nearest grant wins, then the team name."""
    for members_only in (True, False):
        for granted in _ancestor_paths(path):
            for team, member in grants.get(granted, ()):
                if member or not members_only:
                    return team
    return None


_QUEUES_SQL: str | None = None


def _queues_sql() -> str:
    """Queues by path, each with whether it is a leaf and one row per team granted it (with
    whether the user is a member): every column of Queue and Team, so both are built whole."""
    global _QUEUES_SQL
    if _QUEUES_SQL is None:
        from quotas.models import TeamMembership

        qn = connection.ops.quote_name
        through = Team.queues.through._meta
        qcols = ", ".join(f"q.{qn(str(f.column))}" for f in Queue._meta.concrete_fields)
        tcols = ", ".join(f"t.{qn(str(f.column))}" for f in Team._meta.concrete_fields)
        tm = TeamMembership._meta
        _QUEUES_SQL = (
            f"SELECT {qcols}, NOT EXISTS (SELECT 1 FROM {qn(Queue._meta.db_table)} c"
            f" WHERE c.{qn('parent_id')} = q.{qn('id')}), {tcols},"
            f" EXISTS (SELECT 1 FROM {qn(tm.db_table)} m WHERE m.{qn('team_id')} = t.{qn('id')}"
            f" AND m.{qn('user_id')} = %s)"
            f" FROM {qn(Queue._meta.db_table)} q"
            f" LEFT JOIN {qn(through.db_table)} tq ON tq.{qn('queue_id')} = q.{qn('id')}"
            f" LEFT JOIN {qn(Team._meta.db_table)} t ON t.{qn('id')} = tq.{qn('team_id')}"
            f" WHERE q.{qn('path')} IN ({{paths}}) ORDER BY t.{qn('name')}"
        )
    return _QUEUES_SQL


def policy_priority_class(verdict: Any, requested: PriorityClass,
                          classes: Mapping[str, PriorityClass]) -> PriorityClass:
    """The class a priority policy imposes on a request (noted in the verdict's audit), else
    the one requested; a policy naming an unknown class is a field error."""
    if not verdict.priority_class or verdict.priority_class == requested.name:
        return requested
    imposed = classes.get(verdict.priority_class)
    if imposed is None:
        raise ValidationError({"priority_class": [
            f"a policy imposes unknown priority class {verdict.priority_class!r}"]})
    by = f"policy {verdict.priority_policy}" if verdict.priority_policy else "policy"
    verdict.audit.append(f"priority class {requested.name} -> {imposed.name} (set by {by})")
    return imposed


class SubmitLookups:
    """What validating submissions reads from the database, read once per call (a batch of
    submissions costs a handful of queries, not a handful each).

    The queues named, with their ancestors, whether each is a leaf and the teams granted each
    come in one query for the whole batch (plain SQL: the ORM's query building cost more than
    the query); that gives whether the user may use a leaf and the team to account. Priority
    classes and flavors come in one query.

    With a change-log view (PostgreSQL, `core.changes`), both reads are cached per
    thread (topic `config`: queues, teams, memberships, grants, classes, flavors) until one of
    those tables changes in any process: a warm submission reads neither.
    """

    def __init__(self, user: Any, view: Any = None) -> None:
        self.user = user
        self.view = view
        self._queues: dict[str, Queue | None] = {}
        self._leaf: dict[int, bool] = {}
        self._grants: dict[str, list[Grant]] = {}
        self._classes: dict[str, PriorityClass] | None = None
        self._flavors: dict[str, Flavor] | None = None

    def prefetch_queues(self, paths: set[str]) -> None:
        wanted = {a for p in paths - set(self._queues) for a in _ancestor_paths(p)}
        wanted -= set(self._queues)
        if not wanted:
            return
        nq = len(Queue._meta.concrete_fields)
        qnames = [f.attname for f in Queue._meta.concrete_fields]
        tnames = [f.attname for f in Team._meta.concrete_fields]
        ordered = sorted(wanted)

        def load() -> list[tuple[Any, ...]]:
            sql = _queues_sql().replace("{paths}", ", ".join(["%s"] * len(ordered)))
            with hot_cursor() as cursor:
                cursor.execute(sql, [self.user.pk, *ordered])
                return cursor.fetchall()

        rows = (self.view.get("config", ("submit queues", self.user.pk, tuple(ordered)), load)
                if self.view is not None else load())
        for path in wanted:
            self._queues[path] = None
            self._grants[path] = []
        teams: dict[int, Team] = {}
        for row in rows:
            path = row[qnames.index("path")]
            if self._queues[path] is None:
                queue = Queue.from_db(connection.alias, qnames, row[:nq])
                self._queues[path] = queue
                self._leaf[queue.pk] = bool(row[nq])
            team_row = row[nq + 1:-1]
            if team_row[0] is not None:
                team = teams.get(team_row[0])
                if team is None:
                    team = teams[team_row[0]] = Team.from_db(connection.alias, tnames, team_row)
                self._grants[path].append((team, bool(row[-1])))

    def queue(self, path: str) -> Queue | None:
        if path not in self._queues:
            self.prefetch_queues({path})
        return self._queues[path]

    def is_leaf(self, queue: Queue) -> bool:
        if queue.pk not in self._leaf:
            self._leaf[queue.pk] = not Queue.objects.filter(parent_id=queue.pk).exists()
        return self._leaf[queue.pk]

    def may_use(self, queue: Queue) -> bool:
        """Admins may use every leaf; others the leaves granted (or whose ancestor is granted)
        to a team of theirs, as `user_leaf_queues` says."""
        if self.user.is_staff or self.user.is_superuser:
            return True
        self.prefetch_queues({queue.path})
        return any(member for a in _ancestor_paths(queue.path)
                   for _, member in self._grants.get(a, ()))

    def team(self, queue: Queue) -> Team | None:
        self.prefetch_queues({queue.path})
        return _team_from(self._grants, queue.path)

    def _load_names(self) -> None:
        # Both tables are a handful of rows: one round trip for the two.
        def load() -> list[tuple[Any, ...]]:
            with hot_cursor() as cursor:
                cursor.execute(
                    f"SELECT 'c', id, name, value, can_preempt FROM {PriorityClass._meta.db_table}"
                    f" UNION ALL SELECT 'f', id, name, NULL, NULL FROM {Flavor._meta.db_table}")
                return cursor.fetchall()

        rows = (self.view.get("config", "submit names", load) if self.view is not None
                else load())
        classes = [PriorityClass.from_db(connection.alias, ["id", "name", "value",
                                                            "can_preempt"], r[1:])
                   for r in rows if r[0] == "c"]
        flavors = [Flavor.from_db(connection.alias, ["id", "name"], r[1:3])
                   for r in rows if r[0] == "f"]
        self._classes = {p.name: p for p in sorted(classes, key=lambda p: (-p.value, p.name))}
        self._flavors = {f.name: f for f in sorted(flavors, key=lambda f: f.name)}

    @property
    def classes(self) -> dict[str, PriorityClass]:
        if self._classes is None:
            self._load_names()
        assert self._classes is not None
        return self._classes

    @property
    def flavors(self) -> dict[str, Flavor]:
        if self._flavors is None:
            self._load_names()
        assert self._flavors is not None
        return self._flavors
