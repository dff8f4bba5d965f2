"""Submission: a validated request stored `pending` with its pod sets and first events, in one
statement on PostgreSQL, with its place in the queue read by the same statement.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from core import changes, db
from core.db import hot_cursor
from quotas.models import Queue
from scheduling import enqueue, extensions, kinds
from scheduling.backends.naming import LABEL_GANG, LABEL_GANG_OF
from scheduling.models import (
    EventCode,
    EventType,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.request.approvals import approval_reason, approval_thresholds
from scheduling.request.check import RequestChecker
from scheduling.request.lookups import SubmitLookups, policy_priority_class
from scheduling.request.manifests import gang_manifests
from scheduling.request.names import names_unique
from scheduling.request.validation import (
    MAX_NAME,
    _validate,
    gpus_shown,
)
from scheduling.selectors import position_params, position_sql
from scheduling.transitions import (
    event_new,
)

logger = logging.getLogger(__name__)

S = WorkloadState


@dataclass(frozen=True)
class Submitted:
    """One recorded submission with the rows written for it, so an answer can be built from
    them without reading them back (a new workload has no admission yet)."""

    workload: Workload
    pod_sets: list[PodSet]
    events: list[WorkloadEvent]
    # The workloads of all its gangs, itself first, when the submission was split into gangs.
    gangs: tuple[Workload, ...] = ()


@names_unique
@transaction.atomic
def workload_submit_detailed(*, user: Any, data: Mapping[str, Any],
                             now: datetime | None = None, nudge: bool = True) -> Submitted:
    """`workload_submit`, handing back the rows it wrote too (the API's 201 answer); a
    submission split into gangs hands back its first, with every gang's workload."""
    done = _submit(user=user, items=[data], now=now, nudge=nudge)
    if len(done) == 1:
        return done[0]
    return replace(done[0], gangs=tuple(d.workload for d in done))


@names_unique
@transaction.atomic
def workload_submit(*, user: Any, data: Mapping[str, Any], now: datetime | None = None,
                    nudge: bool = True) -> Workload:
    """Validate and record a submission: `pending`, or `rejected` with reasons if impossible.

    Malformed input raises ValidationError (nothing saved). Registered submission checks
    (policies, budgets) and the engine's request check may reject it: it is then saved
    `rejected` with one reason event per reason, so the user sees why.
    """
    return _submit(user=user, items=[data], now=now, nudge=nudge)[0].workload


@names_unique
@transaction.atomic
def workloads_submit(*, user: Any, items: list[Mapping[str, Any]],
                     now: datetime | None = None, nudge: bool = True) -> list[Workload]:
    """Submit several workloads at once, all or nothing (bulk inserts; same rules as
    `workload_submit`). A malformed item raises ValidationError naming it (`[3] name: ...`
    when there are several)."""
    return [done.workload for done in _submit(user=user, items=items, now=now, nudge=nudge)]


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
            nudge: bool) -> list[Submitted]:
    """The body of `workloads_submit`, inside the caller's transaction."""
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
        # A kind of independent gangs (a LeaderWorkerSet's groups) is a workload per gang.
        pairs = [(data, gang) for n, (data, clean) in enumerate(zip(items, cleans, strict=True))
                 for gang in _gangs(clean, f"[{n}] " if len(items) > 1 else "")]
        cleans = [clean for _, clean in pairs]
        _refuse_names_twice(cleans)
        checker = RequestChecker(now)
        plans = []
        for data, clean in pairs:
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
                labels=clean["labels"], kind=clean["kind"], manifest=clean["manifest"],
                interactive=clean["interactive"], idle_timeout_s=clean["idle_timeout_s"],
                time_limit_s=clean["time_limit_s"],
                submitted_at=now, state_changed_at=now,
            )
            pod_sets = [
                PodSet(index=p["index"], count=p["count"], flavors=p["flavors"], gpus=p["gpus"],
                       cpu=p["cpu"], memory_gib=p["memory_gib"], gpu_memory_gib=p["gpu_memory_gib"],
                       resources=p["resources"])
                for p in clean["pods"]
            ]
            workload.gpus_total = sum((p.count * p.gpus for p in pod_sets), Decimal(0))
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
                    workload.reason_code, workload.reason_message = EventCode.NEEDS_APPROVAL, held
            plans.append((workload, pod_sets, verdict, reasons))

    events_of: dict[int, list[WorkloadEvent]] = {}
    for workload, pod_sets, verdict, reasons in plans:
        gpus = gpus_shown(sum(p.count * p.gpus for p in pod_sets))
        events = [event_new(
            workload, EventType.SUBMITTED, at=now, actor=user,
            message=f"submitted to {workload.queue.path} by {user.get_username()}: "
            f"{gpus} GPUs in {sum(p.count for p in pod_sets)} pods",
            payload={"priority_class": workload.priority_class.name})]
        events += [event_new(workload, EventType.POLICY, at=now, actor=user, message=line)
                   for line in verdict.audit]
        if workload.needs_approval:
            events.append(event_new(
                workload, EventType.POLICY, at=now, actor=user, code=EventCode.NEEDS_APPROVAL,
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
    if len(plans) == 1 and db.postgres():
        _insert_one(workloads[0], plans[0][1], events_of[id(workloads[0])],
                    position=workloads[0].state == S.PENDING)
    else:
        Workload.objects.bulk_create(workloads)
        for workload, pod_sets, _, _ in plans:
            for ps in pod_sets:
                ps.workload = workload
        PodSet.objects.bulk_create([ps for p in plans for ps in p[1]])
        WorkloadEvent.objects.bulk_create([e for w in workloads for e in events_of[id(w)]])
    if nudge and any(w.state == S.PENDING and not w.needs_approval for w in workloads):
        transaction.on_commit(enqueue.cycle_nudge)
    held_now = [w for w in workloads if w.needs_approval and w.state == S.PENDING]
    if held_now:
        transaction.on_commit(lambda: _ask_approvers(held_now, user))
    return [Submitted(workload, pod_sets, events_of[id(workload)])
            for workload, pod_sets, _, _ in plans]




def _ask_approvers(workloads: list[Workload], user: Any) -> None:
    """Email the approvers of each held workload (its queue's leads, else the admins)."""
    from django.urls import reverse

    from portal.pages.approvers import notify_approvers

    for w in workloads:
        notify_approvers(
            queue_id=w.queue_id, requester_id=user.pk,
            subject=f"Approval needed: workload {w.name} in {w.queue.path}",
            body=f"{user.get_username()} submitted {w.name} to {w.queue.path}; it waits for "
            f"your approval ({w.reason_message}).\nDecide at {reverse('approval-inbox')}",
            workload_id=w.pk)



def _gangs(clean: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A validated submission split into its kind's independent gangs, each a submission of
    its own named `<name>-<group>` and labelled with the whole's name and its group index
    (a LeaderWorkerSet's replica groups); as it is when it is one gang. One adopted from a
    cluster is split too, each group keeping the object's name (`allot.io/object`): the one
    object there is the user's, each group's pods are gated and lifted on their own."""
    if not clean["kind"]:
        return [clean]
    gangs = gang_manifests(clean["kind"], clean["manifest"], clean["pods"])
    if len(gangs) == 1:
        return [clean]
    name = clean["name"]
    longest = f"{name}-{len(gangs) - 1}"
    if len(longest) > MAX_NAME:
        kind = kinds.KINDS[clean["kind"]].kind
        raise ValidationError({f"{where}name": [
            f"{name!r}: {len(gangs)} {kind} groups are named {name}-0 .. {longest}, "
            f"{len(longest)} characters > {MAX_NAME}: give a shorter name"]})
    return [{**clean, "name": f"{name}-{index}", "manifest": manifest, "pods": pods,
             "labels": {**clean["labels"], LABEL_GANG_OF: name, LABEL_GANG: str(index)}}
            for index, (manifest, pods) in enumerate(gangs)]


def _refuse_names_twice(cleans: list[dict[str, Any]]) -> None:
    """A batch naming the same queue and name twice (the open ones already stored are the
    database's to refuse: `names.names_unique`)."""
    seen: set[tuple[int, str]] = set()
    errors: dict[str, list[str]] = {}
    for n, clean in enumerate(cleans):
        key = (clean["queue"].pk, clean["name"])
        if key in seen:
            errors[f"[{n}] name"] = [f"{clean['name']!r} is given twice for "
                                     f"{clean['queue'].path} in this batch: names are unique "
                                     "among a queue's open workloads"]
        seen.add(key)
    if errors:
        raise ValidationError(errors)

