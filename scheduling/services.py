"""Workload writes: submission, cancellation, and the state moves the workers make.

Every state change goes through `workload_transition`, which checks `ALLOWED_TRANSITIONS` and
returns the event row to save in the same transaction (the cycle bulk-creates them).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from core import changes
from core.db import hot_cursor
from quotas.models import Flavor, Queue, Team, TeamRole
from scheduling import extensions
from scheduling.models import (
    Admission,
    EndReason,
    EventType,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.selectors import position_params, position_sql

logger = logging.getLogger(__name__)

S = WorkloadState
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.RESERVED, S.REJECTED, S.CANCELLED, S.FAILED}),
    # reserved -> pending: refused dispatch, pods-ready timeout, reclaimed while stuck.
    S.RESERVED: frozenset({S.RUNNING, S.PENDING, S.PREEMPTING, S.CANCELLED, S.FINISHED,
                           S.FAILED}),
    # running -> pending: the backend lost the pods and the workload may retry.
    S.RUNNING: frozenset({S.FINISHED, S.FAILED, S.PREEMPTING, S.CANCELLED, S.PENDING}),
    # preempting -> finished: it completed inside its grace period.
    S.PREEMPTING: frozenset({S.PENDING, S.CANCELLED, S.FINISHED, S.FAILED}),
    S.FINISHED: frozenset(),
    S.CANCELLED: frozenset(),
    S.REJECTED: frozenset(),
    S.FAILED: frozenset(),
}

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_POD_SETS = 8
MAX_GRACE_S = 3600
STRATEGIES = ("", "binpack", "spread")


class TransitionError(ValueError):
    """A state change the transitions table does not allow."""


def workload_transition(
    workload: Workload,
    to: str,
    *,
    at: datetime,
    event_type: str,
    actor: Any = None,
    code: str = "",
    message: str = "",
    payload: Mapping[str, Any] | None = None,
) -> WorkloadEvent:
    """Move `workload` to state `to` (in memory) and return its unsaved event row.

    The caller saves both in one transaction (the cycle does it in bulk).
    """
    if to not in ALLOWED_TRANSITIONS[workload.state]:
        raise TransitionError(f"workload {workload.pk} ({workload.name}): {workload.state} -> "
                              f"{to} is not an allowed transition")
    workload.state = to
    workload.state_changed_at = at
    if to in (S.FINISHED, S.CANCELLED, S.REJECTED, S.FAILED):
        workload.finished_at = at
    return WorkloadEvent(
        workload=workload, at=at, type=event_type, actor=actor, code=code, message=message,
        payload=dict(payload or {}),
    )


def event_new(
    workload: Workload, event_type: str, *, at: datetime, code: str = "", message: str = "",
    actor: Any = None, payload: Mapping[str, Any] | None = None,
) -> WorkloadEvent:
    """An unsaved event row that is not a state change (a reason, a dispatch step)."""
    return WorkloadEvent(workload=workload, at=at, type=event_type, actor=actor, code=code,
                         message=message, payload=dict(payload or {}))


# --- submission -------------------------------------------------------------------------------

def _decimal(value: Any, field: str, errors: dict[str, list[str]]) -> Decimal | None:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        errors.setdefault(field, []).append(f"{value!r} is not a number")
        return None
    if not number.is_finite():
        errors.setdefault(field, []).append(f"{value!r} is not a finite number")
        return None
    return number


def _int(value: Any, field: str, errors: dict[str, list[str]], *, minimum: int = 0,
         maximum: int | None = None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        errors.setdefault(field, []).append(f"{value!r} is not a whole number")
        return None
    try:
        number = int(value)
    except ValueError:
        errors.setdefault(field, []).append(f"{value!r} is not a whole number")
        return None
    if number < minimum:
        errors.setdefault(field, []).append(f"{number} < {minimum}: must be at least {minimum}")
        return None
    if maximum is not None and number > maximum:
        errors.setdefault(field, []).append(f"{number} > {maximum}: must be at most {maximum}")
        return None
    return number


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


Grant = tuple[Team, bool]  # a team granted a queue, and whether the submitting user is in it


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


def _team_for(user: Any, queue: Queue) -> Team | None:
    """The team a workload on `queue` is accounted to (see `_team_from`)."""
    lk = SubmitLookups(user)
    lk.prefetch_queues({queue.path})
    return _team_from(lk._grants, queue.path)


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
    verdict.audit.append(f"priority class {requested.name} -> {imposed.name} (set by policy)")
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
        self.request_checker: Any = None

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


def _validate(user: Any, data: Mapping[str, Any], lk: SubmitLookups) -> dict[str, Any]:
    """Check a submission's fields; raise ValidationError naming every bad field at once."""
    errors: dict[str, list[str]] = {}
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["expected a JSON object"]})
    clean: dict[str, Any] = {}

    name = data.get("name")
    if not isinstance(name, str) or not name:
        errors["name"] = ["required: a DNS-safe name (lowercase letters, digits, '-')"]
    elif not DNS_LABEL.match(name):
        errors["name"] = [f"{name!r} is not DNS-safe: use at most 63 lowercase letters, digits "
                          "and '-', starting and ending with a letter or digit"]
    clean["name"] = name

    queue_path = data.get("queue")
    queue = None
    if not isinstance(queue_path, str) or not queue_path:
        errors["queue"] = ["required: the path of a leaf queue, e.g. rd/vision"]
    else:
        queue = lk.queue(queue_path)
        if queue is None:
            errors["queue"] = [f"unknown queue {queue_path!r}"]
        elif not lk.is_leaf(queue):
            errors["queue"] = [f"{queue_path} is not a leaf queue: submit to one of its leaves"]
        elif not lk.may_use(queue):
            errors["queue"] = [f"none of your teams may use queue {queue_path}"]
    clean["queue"] = queue

    pc_name = data.get("priority_class") or "training"
    pc = lk.classes.get(pc_name) if isinstance(pc_name, str) else None
    if pc is None:
        known = ", ".join(sorted(lk.classes, key=lambda n: -lk.classes[n].value))
        errors["priority_class"] = [f"unknown priority class {pc_name!r} (one of {known})"]
    clean["priority_class"] = pc

    for flag, default in (("preemptible", True), ("checkpoint", True)):
        value = data.get(flag, default)
        if not isinstance(value, bool):
            errors[flag] = [f"{value!r} is not true or false"]
        clean[flag] = value

    strategy = data.get("strategy") or ""
    if strategy not in STRATEGIES:
        errors["strategy"] = [f"{strategy!r} is not a strategy (binpack or spread)"]
    clean["strategy"] = strategy

    for text_field, limit in (("image", 500), ("dataset", 200)):
        value = data.get(text_field) or ""
        if not isinstance(value, str) or len(value) > limit:
            errors[text_field] = [f"must be text of at most {limit} characters"]
        clean[text_field] = value

    command = data.get("command") or []
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        errors["command"] = ["must be a list of strings"]
    clean["command"] = command

    clean["duration_hint_s"] = None
    if data.get("duration_hint_s") is not None:
        clean["duration_hint_s"] = _int(data["duration_hint_s"], "duration_hint_s", errors,
                                        minimum=1)
    clean["termination_grace_s"] = 30
    if data.get("termination_grace_s") is not None:
        clean["termination_grace_s"] = _int(data["termination_grace_s"], "termination_grace_s",
                                            errors, minimum=0, maximum=MAX_GRACE_S)

    topology = data.get("topology") or {}
    if not isinstance(topology, Mapping) or set(topology) - {"same"} or (
        topology and topology.get("same") != "rack"
    ):
        errors["topology"] = [f"{topology!r}: only {{\"same\": \"rack\"}} is supported"]
    clean["topology"] = dict(topology) if isinstance(topology, Mapping) else {}

    labels = data.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and LABEL_KEY.match(k) and isinstance(v, str) and len(v) <= 63
        for k, v in labels.items()
    ):
        errors["labels"] = ["must map label keys to strings of at most 63 characters"]
    clean["labels"] = dict(labels) if isinstance(labels, Mapping) else {}

    pods = data.get("pods")
    clean_pods: list[dict[str, Any]] = []
    known_flavors = lk.flavors
    if not isinstance(pods, list) or not pods:
        errors["pods"] = ["required: a list of pod sets, e.g. [{\"count\": 1, \"flavors\": "
                          "[\"a100-80g\"], \"gpus\": 8}]"]
    elif len(pods) > MAX_POD_SETS:
        errors["pods"] = [f"{len(pods)} pod sets > {MAX_POD_SETS}"]
    else:
        for i, pod in enumerate(pods):
            where = f"pods[{i}]"
            if not isinstance(pod, Mapping):
                errors.setdefault("pods", []).append(f"{where}: expected an object")
                continue
            count = _int(pod.get("count", 1), f"{where}.count", errors, minimum=1,
                         maximum=10000)
            gpus = _int(pod.get("gpus", 0), f"{where}.gpus", errors, minimum=0, maximum=64)
            cpu = _decimal(pod.get("cpu", 0), f"{where}.cpu", errors)
            mem = _decimal(pod.get("memory_gib", 0), f"{where}.memory_gib", errors)
            for label, value in ((f"{where}.cpu", cpu), (f"{where}.memory_gib", mem)):
                if value is not None and value < 0:
                    errors.setdefault(label, []).append(f"{value} < 0: must not be negative")
            gmem = None
            if pod.get("gpu_memory_gib") is not None:
                gmem = _int(pod["gpu_memory_gib"], f"{where}.gpu_memory_gib", errors, minimum=1)
            if gpus == 0 and cpu is not None and mem is not None and cpu <= 0 and mem <= 0:
                errors.setdefault(where, []).append(
                    "asks for nothing: set gpus, cpu or memory_gib above 0")
            flavors = pod.get("flavors")
            if not isinstance(flavors, list) or not flavors or not all(
                isinstance(f, str) for f in flavors
            ):
                errors.setdefault(f"{where}.flavors", []).append(
                    "required: acceptable flavors in order of preference")
                flavors = []
            else:
                unknown = [f for f in flavors if f not in known_flavors]
                if unknown:
                    errors.setdefault(f"{where}.flavors", []).append(
                        f"unknown flavor(s) {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(known_flavors))})")
                if len(set(flavors)) != len(flavors):
                    errors.setdefault(f"{where}.flavors", []).append("lists a flavor twice")
                if clean_pods and flavors != clean_pods[0]["flavors"]:
                    errors.setdefault(f"{where}.flavors", []).append(
                        f"{flavors} differs from pods[0].flavors {clean_pods[0]['flavors']}: "
                        "a workload runs on one flavor, so every pod set lists the same ones")
            clean_pods.append({"index": i, "count": count, "flavors": flavors, "gpus": gpus,
                               "cpu": cpu, "memory_gib": mem, "gpu_memory_gib": gmem})
    clean["pods"] = clean_pods
    if errors:
        raise ValidationError(errors)
    return clean


@transaction.atomic
def workload_submit(*, user: Any, data: Mapping[str, Any], now: datetime | None = None,
                    nudge: bool = True) -> Workload:
    """Validate and record a submission: `pending`, or `rejected` with reasons if impossible.

    Malformed input raises ValidationError (nothing saved). Registered submission checks
    (policies, budgets) and the engine's request check may reject it: it is then saved
    `rejected` with one reason event per reason, so the user sees why.
    """
    return _submit(user=user, items=[data], now=now, nudge=nudge)[0]


@transaction.atomic
def workloads_submit(*, user: Any, items: list[Mapping[str, Any]],
                     now: datetime | None = None, nudge: bool = True) -> list[Workload]:
    """Submit several workloads at once, all or nothing (bulk inserts; same rules as
    `workload_submit`). A malformed item raises ValidationError naming it (`[3] name: ...`
    when there are several)."""
    return _submit(user=user, items=items, now=now, nudge=nudge)


def _prime(instance: Any, name: str, rows: list[Any]) -> None:
    """Set what `instance.<name>.all()` returns to `rows` (as `prefetch_related` would), so
    the caller reads back what was just written without a query. The queryset is the
    manager's own (filtered on the instance), so `instance.<name>.filter(...)` still reads
    only the instance's rows."""
    manager = getattr(instance, name)
    qs = manager.get_queryset()
    qs._result_cache = rows
    qs._prefetch_done = True
    if not hasattr(instance, "_prefetched_objects_cache"):
        instance._prefetched_objects_cache = {}
    instance._prefetched_objects_cache[manager.field.remote_field.cache_name] = qs


_INSERT_COLUMNS: dict[tuple[type, str], tuple[list[Any], list[str], list[str]]] = {}


def _insert_columns(model: Any, skip: str = "") -> tuple[list[Any], list[str], list[str]]:
    """The fields a row of `model` is inserted with (all but the primary key and `skip`),
    their quoted column names and their `%s::type` placeholders (worked out once)."""
    key = (model, skip)
    if key not in _INSERT_COLUMNS:
        fields = [f for f in model._meta.concrete_fields
                  if not f.primary_key and f.attname != skip]
        qn = connection.ops.quote_name
        _INSERT_COLUMNS[key] = (fields, [qn(str(f.column)) for f in fields],
                                [f"%s::{f.db_type(connection)}" for f in fields])
    return _INSERT_COLUMNS[key]


def _row_sql(obj: Any, fields: list[Any], marks: list[str]) -> tuple[str, list[Any]]:
    """`(%s::type, ...)` and its parameters for one row (values prepared as Django's INSERT
    prepares them)."""
    db = connections[DEFAULT_DB_ALIAS]  # not the proxy: it costs a lookup per field
    return ("(" + ", ".join(marks) + ")",
            [f.get_db_prep_save(f.pre_save(obj, True), db) for f in fields])


# What `selectors.workload_queue_position` reads, for a workload being inserted by the same
# statement (its row is not visible to the statement, and its id is `w`'s): the pending work of
# its queue ordered before it, and the queue's open admissions, column by column.
_AHEAD_SQL, _ADMITTED_SQL = position_sql("(SELECT id FROM w)")
_POSITION_CTES = f"h AS ({_AHEAD_SQL}), a AS ({_ADMITTED_SQL})"
_POSITION_COLUMNS = (
    ", (SELECT n FROM h), (SELECT g FROM h), ARRAY(SELECT gpus FROM a ORDER BY id),"
    " ARRAY(SELECT duration_hint_s FROM a ORDER BY id),"
    " ARRAY(SELECT progress_s FROM a ORDER BY id),"
    " ARRAY(SELECT running_at FROM a ORDER BY id), ARRAY(SELECT reserved_at FROM a ORDER BY id)")


def _insert_one(workload: Workload, pod_sets: list[PodSet], events: list[WorkloadEvent],
                *, position: bool = False) -> None:
    """Insert one workload with its pod sets and events in one statement (PostgreSQL: data-
    modifying CTEs), where bulk_create takes three; sets the ids as bulk_create does.

    With `position` (a pending workload), the same statement reads what its queue position
    needs (`selectors.workload_queue_position`), kept on the workload: the 201 answer costs no
    other query."""
    qn = connection.ops.quote_name
    parts, params = [], []
    wfields, wcols, wmarks = _insert_columns(Workload)
    row, row_params = _row_sql(workload, wfields, wmarks)
    parts.append(f"w AS (INSERT INTO {qn(Workload._meta.db_table)} ({', '.join(wcols)})"
                 f" VALUES {row} RETURNING id)")
    params += row_params
    for name, model, rows in (("p", PodSet, pod_sets), ("e", WorkloadEvent, events)):
        fields, cols, marks = _insert_columns(model, skip="workload_id")
        values = []
        for obj in rows:
            row, row_params = _row_sql(obj, fields, marks)
            values.append(row)
            params += row_params
        parts.append(
            f"{name} AS (INSERT INTO {qn(model._meta.db_table)} (workload_id, {', '.join(cols)})"
            f" SELECT w.id, v.* FROM w, (VALUES {', '.join(values)}) AS v({', '.join(cols)})"
            " RETURNING id)")
    columns = ""
    if position:
        parts.append(_POSITION_CTES)
        params += position_params(workload, [])
        columns = _POSITION_COLUMNS
    sql = (f"WITH {', '.join(parts)} SELECT (SELECT id FROM w),"
           f" ARRAY(SELECT id FROM p ORDER BY id), ARRAY(SELECT id FROM e ORDER BY id){columns}")
    with hot_cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    workload_id, pod_set_ids, event_ids = row[:3]
    if position:
        n_ahead, ahead_gpus, gpus, hints, progress, running, reserved = row[3:]
        workload._position_rows = (  # type: ignore[attr-defined]
            int(n_ahead), int(ahead_gpus),
            [(int(g), None if h is None else int(h), float(pr), r, rs)
             for g, h, pr, r, rs in zip(gpus, hints, progress, running, reserved, strict=True)])
    # Rows take their ids in the order of VALUES (as bulk_create's RETURNING relies on too).
    workload.pk = workload_id
    saved_ids: list[tuple[Any, int]] = [*zip(pod_sets, pod_set_ids, strict=True),
                                        *zip(events, event_ids, strict=True)]
    for child, pk in saved_ids:
        child.pk = pk
        child.workload = workload
    for saved in (workload, *pod_sets, *events):
        saved._state.adding = False
        saved._state.db = connection.alias


def _submit(*, user: Any, items: list[Mapping[str, Any]], now: datetime | None,
            nudge: bool) -> list[Workload]:
    """The body of `workloads_submit`, inside the caller's transaction.

    The returned workloads come with their pod sets, events and (no) admissions in the
    prefetch cache: what the API answers with, without reading it back.
    """
    from scheduling.approvals import (  # approvals imports this module
        approval_reason,
        approval_thresholds,
    )
    from scheduling.cycle import RequestChecker  # the cycle module imports this one

    now = now or timezone.now()
    max_gpus, max_hours = approval_thresholds()
    # Everything before the insert only reads: one change-log check serves the lookups, the
    # policies, the budgets and the impossibility check (PostgreSQL; elsewhere None).
    with changes.pinned() as view:
        lk = SubmitLookups(user, view)
        lk.prefetch_queues({str(d["queue"]) for d in items if isinstance(d, Mapping)
                            and isinstance(d.get("queue"), str)})
        cleans = []
        for n, data in enumerate(items):
            try:
                cleans.append(_validate(user, data, lk))
            except ValidationError as exc:
                if len(items) == 1:
                    raise
                raise ValidationError({f"[{n}] {k}": v for k, v in exc.message_dict.items()}
                                      ) from exc
        checker = RequestChecker(now)
        plans = []
        for data, clean in zip(items, cleans, strict=True):
            queue: Queue = clean["queue"]
            team = lk.team(queue)
            verdict = extensions.run_submission_checks(extensions.SubmissionContext(
                user=user, queue=queue, team=team, request=dict(data), is_update=False))
            priority_class = policy_priority_class(verdict, clean["priority_class"], lk.classes)
            workload = Workload(
                name=clean["name"], queue=queue, team=team, owner=user, state=S.PENDING,
                priority_class=priority_class, preemptible=clean["preemptible"],
                checkpoint=clean["checkpoint"], strategy=clean["strategy"],
                dataset=clean["dataset"], image=clean["image"], command=clean["command"],
                duration_hint_s=clean["duration_hint_s"],
                termination_grace_s=clean["termination_grace_s"], topology=clean["topology"],
                labels=clean["labels"], submitted_at=now, state_changed_at=now,
            )
            pod_sets = [
                PodSet(index=p["index"], count=p["count"], flavors=p["flavors"], gpus=p["gpus"],
                       cpu=p["cpu"], memory_gib=p["memory_gib"], gpu_memory_gib=p["gpu_memory_gib"])
                for p in clean["pods"]
            ]
            reasons = list(verdict.deny) or checker.check(workload, pod_sets)
            if reasons:
                workload.state = S.REJECTED
                workload.finished_at = now
                workload.reason_code, workload.reason_message = reasons[0]
            else:
                # Above the thresholds it waits for a lead or an admin; the cycle skips it.
                held = approval_reason(clean)
                if held:
                    workload.needs_approval = True
                    workload.reason_code, workload.reason_message = "NEEDS_APPROVAL", held
            plans.append((workload, pod_sets, verdict, reasons))

    events_of: dict[int, list[WorkloadEvent]] = {}
    for workload, pod_sets, verdict, reasons in plans:
        gpus = sum(p.count * p.gpus for p in pod_sets)
        events = [event_new(
            workload, EventType.SUBMITTED, at=now, actor=user,
            message=f"submitted to {workload.queue.path} by {user.get_username()}: "
            f"{gpus} GPUs in {sum(p.count for p in pod_sets)} pods",
            payload={"priority_class": workload.priority_class.name})]
        events += [event_new(workload, EventType.POLICY, at=now, actor=user, message=line)
                   for line in verdict.audit]
        if workload.needs_approval:
            events.append(event_new(
                workload, EventType.POLICY, at=now, actor=user, code="NEEDS_APPROVAL",
                message=workload.reason_message,
                payload={"gpus": gpus, "max_gpus": max_gpus,
                         "duration_hint_s": workload.duration_hint_s, "max_hours": max_hours}))
        if reasons:
            # The rejection is a state change of its own, recorded after the submission.
            events.append(event_new(workload, EventType.REJECTED, at=now, actor=user,
                                    code=reasons[0][0],
                                    message=f"rejected: {len(reasons)} reason(s)"))
            events += [event_new(workload, EventType.REASON, at=now, code=code,
                                 message=message) for code, message in reasons]
        events_of[id(workload)] = events

    workloads = [p[0] for p in plans]
    if len(plans) == 1 and connection.vendor == "postgresql":
        _insert_one(workloads[0], plans[0][1], events_of[id(workloads[0])],
                    position=workloads[0].state == S.PENDING)
    else:
        Workload.objects.bulk_create(workloads)
        for workload, pod_sets, _, _ in plans:
            for ps in pod_sets:
                ps.workload = workload
        PodSet.objects.bulk_create([ps for p in plans for ps in p[1]])
        WorkloadEvent.objects.bulk_create([e for w in workloads for e in events_of[id(w)]])
    for workload, pod_sets, _, _ in plans:
        _prime(workload, "pod_sets", pod_sets)
        _prime(workload, "events", events_of[id(workload)])
        _prime(workload, "admissions", [])
    if nudge and any(w.state == S.PENDING and not w.needs_approval for w in workloads):
        transaction.on_commit(cycle_nudge)
    return workloads


# --- cancellation -----------------------------------------------------------------------------

def user_may_manage(user: Any, workload: Workload) -> bool:
    """The owner, a lead of the workload's team, or an admin may cancel it."""
    if user.is_staff or user.is_superuser or workload.owner_id == user.pk:
        return True
    return workload.team is not None and workload.team.memberships.filter(
        user=user, role=TeamRole.LEAD).exists()


@transaction.atomic
def workload_cancel(*, user: Any, workload: Workload, now: datetime | None = None) -> Workload:
    """Cancel a workload that has not ended; its capacity is released at once."""
    now = now or timezone.now()
    workload = Workload.objects.select_for_update().get(pk=workload.pk)
    if not user_may_manage(user, workload):
        raise PermissionDenied("only the owner, a lead of its team or an admin may cancel "
                               f"workload {workload.name}")
    if workload.state not in (S.PENDING, S.RESERVED, S.RUNNING, S.PREEMPTING):
        raise ValidationError(f"workload {workload.name} is already {workload.state}: "
                              "nothing to cancel")
    was = workload.state
    event = workload_transition(workload, S.CANCELLED, at=now, event_type=EventType.CANCELLED,
                                actor=user, message=f"cancelled by {user.get_username()} "
                                f"(was {was})")
    workload.preempt_deadline = None
    workload.save(update_fields=["state", "state_changed_at", "finished_at",
                                 "preempt_deadline"])
    event.save()
    admission = admission_close(workload=workload, at=now, reason=EndReason.CANCELLED)
    if admission is not None:
        from scheduling import tasks

        transaction.on_commit(lambda: tasks.backend_delete.delay(admission.pk))
    transaction.on_commit(cycle_nudge)
    return workload


def admission_close(*, workload: Workload, at: datetime, reason: str) -> Admission | None:
    """End the workload's open admission interval (None if it has none)."""
    admission = Admission.objects.filter(workload=workload, ended_at__isnull=True).first()
    if admission is None:
        return None
    admission.ended_at = at
    admission.end_reason = reason
    admission.save(update_fields=["ended_at", "end_reason"])
    return admission


def backoff_delay_s(n: int) -> float:
    """Pods-ready timeout backoff: 60 s x 2^(n-1), at most 3600 s (n >= 1)."""
    return float(min(3600, 60 * 2 ** max(0, n - 1)))


def backoff_until(now: datetime, n: int) -> datetime:
    """When a workload released for the n-th time may be admitted again."""
    return now + timedelta(seconds=backoff_delay_s(n))


# --- nudging the cycle ------------------------------------------------------------------------

_NUDGE_WINDOW_S = 0.3
_next_nudge_eta: float = 0.0


def cycle_nudge() -> None:
    """Ask for a scheduling cycle soon, at most one per window per process (debounced).

    A nudge already scheduled for the future will see this commit, so later ones in the same
    window are dropped. Broker errors are logged: the beat runs a cycle anyway.
    """
    import time

    global _next_nudge_eta
    now = time.monotonic()
    if _next_nudge_eta > now:
        return
    _next_nudge_eta = now + _NUDGE_WINDOW_S
    try:
        from scheduling import tasks

        tasks.scheduling_cycle.apply_async(kwargs={"nudged": True}, countdown=_NUDGE_WINDOW_S,
                                           expires=10)
    except Exception:
        logger.warning("could not nudge the scheduling cycle; the beat will run it",
                       exc_info=True)
