"""The invariants, read from the database (Django ORM, in one REPEATABLE READ snapshot each).

History, once the system has settled: nothing answered 201 is lost; no cancel answered 200 is
undone (the workload is cancelled, nothing of it was admitted or moved after its cancel, no
admission of it is open); every workload's state is the state its last state event names;
every consecutive pair of state events is in `ALLOWED_TRANSITIONS`.

Capacity, sampled while the load runs and checked again at the end: no queue over its max
(`quotas`' resolved tree), no node holding more GPUs than it has, in three views: the
portal's open admissions (test_concurrency's I1), those plus the capacity held by ended
admissions whose delete the cluster has not confirmed (what the engine promises), and what the
simulated clusters really run (their Jobs' pods that are neither suspended nor done).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduling.models import (
    UNCONFIRMED_END_REASONS,
    Admission,
    EventType,
    Node,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.request.validation import gpus_shown
from scheduling.transitions import ALLOWED_TRANSITIONS

S, E = WorkloadState, EventType
# The state each state-changing event type records (a `submitted` event with a code is a
# resubmission or an update of a pending workload: no state change).
STATE_OF_EVENT = {
    E.SUBMITTED: S.PENDING, E.REJECTED: S.REJECTED, E.ADMITTED: S.RESERVED,
    E.RUNNING: S.RUNNING, E.PREEMPTED: S.PREEMPTING, E.REQUEUED: S.PENDING,
    E.TIMEOUT: S.PENDING, E.FINISHED: S.FINISHED, E.CANCELLED: S.CANCELLED,
    E.FAILED: S.FAILED,
}
MAX_DETAILS = 20


@contextmanager
def snapshot() -> Iterator[None]:
    """One consistent read of the database (a transaction at REPEATABLE READ)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


@dataclass
class History:
    workloads: int = 0
    events: int = 0
    lost: list[int] = field(default_factory=list)
    undone_cancels: list[str] = field(default_factory=list)
    illegal_transitions: list[str] = field(default_factory=list)
    state_not_last_event: list[str] = field(default_factory=list)
    # Not an invariant of the brief, a finding: consecutive events whose times go backwards.
    events_out_of_time_order: list[str] = field(default_factory=list)
    admissions_ending_before_start: list[str] = field(default_factory=list)


def _state_event(etype: str, code: str) -> str | None:
    if etype == E.SUBMITTED and code:
        return None
    return STATE_OF_EVENT.get(etype)


def history(created: list[int], cancelled: list[int]) -> History:
    """The history invariants over every workload in the database."""
    out = History()
    with snapshot():
        states = dict(Workload.objects.values_list("id", "state"))
        events = list(WorkloadEvent.objects.order_by("workload_id", "id").values_list(
            "workload_id", "id", "type", "code", "at"))
        open_admissions = set(Admission.objects.filter(ended_at__isnull=True)
                              .values_list("workload_id", flat=True))
        backwards = list(Admission.objects.filter(ended_at__lt=F("reserved_at")).values_list(
            "workload_id", "reserved_at", "ended_at", "end_reason"))
    out.admissions_ending_before_start = [
        f"workload {wid}: admitted at {start.isoformat()}, ended ({reason}) at "
        f"{end.isoformat()}" for wid, start, end, reason in backwards]
    out.workloads, out.events = len(states), len(events)
    out.lost = sorted(set(created) - set(states))
    timelines: dict[int, list[tuple[int, str, str, object]]] = defaultdict(list)
    for wid, eid, etype, code, at in events:
        timelines[wid].append((eid, etype, code, at))
    for wid, state in states.items():
        _timeline(out, wid, state, timelines.get(wid, []))
    for wid in cancelled:
        if wid not in states:
            continue  # counted as lost
        why = _cancel_undone(states[wid], timelines.get(wid, []), wid in open_admissions)
        if why:
            out.undone_cancels.append(f"workload {wid}: {why}")
    return out


def _timeline(out: History, wid: int, state: str, timeline: list) -> None:
    current: str | None = None
    previous_at = None
    for eid, etype, code, at in timeline:
        if previous_at is not None and at < previous_at:
            out.events_out_of_time_order.append(
                f"workload {wid}: event {eid} ({etype}) at {at.isoformat()} is before the "
                f"event written before it ({previous_at.isoformat()})")
        previous_at = at
        to = _state_event(etype, code)
        if to is None:
            continue
        if current is None and to != S.PENDING:
            out.illegal_transitions.append(f"workload {wid}: first state event {eid} is "
                                           f"{etype} ({to}), not a submission")
        elif current is not None and to not in ALLOWED_TRANSITIONS[current]:
            out.illegal_transitions.append(f"workload {wid}: {current} -> {to} "
                                           f"(event {eid}, {etype})")
        current = to
    if current != state:
        out.state_not_last_event.append(f"workload {wid}: state {state}, last state event "
                                        f"says {current}")


def _cancel_undone(state: str, timeline: list, admission_open: bool) -> str:
    if state != S.CANCELLED:
        return f"state {state} after a cancel answered 200"
    cancels = [i for i, (_, etype, _, _) in enumerate(timeline) if etype == E.CANCELLED]
    if not cancels:
        return "no cancelled event"
    after = [etype for _, etype, code, _ in timeline[cancels[0] + 1:]
             if _state_event(etype, code) is not None]
    if after:
        return f"state events after the cancel: {', '.join(after)}"
    if admission_open:
        return "an admission is open"
    return ""


def capacity_violations() -> list[str]:
    """Queues over max, nodes over their GPUs (three views); [] when all hold."""
    from tests.integration.scheduling.stack.test_concurrency import i1_violations

    with snapshot():
        problems = [f"portal: {p}" for p in i1_violations()]
        node_gpus = {(c, n): g for c, n, g in Node.objects.values_list("cluster_id", "name",
                                                                         "gpus")}
        problems += [f"portal with held capacity: {p}" for p in _over(node_gpus, _held_view())]
        problems += [f"cluster: {p}" for p in _over(node_gpus, _cluster_view())]
    return problems


def _over(node_gpus: dict[tuple[int, str], int],
          used: dict[tuple[int, str], int]) -> list[str]:
    return [f"node {name} of cluster {cluster}: {gpus_shown(gpus)} GPUs > "
            f"{node_gpus.get((cluster, name), 0)}"
            for (cluster, name), gpus in sorted(used.items())
            if gpus > node_gpus.get((cluster, name), 0)]


def _held_view() -> dict[tuple[int, str], int]:
    """GPUs per node of open admissions and of ended ones still held (workers/snapshot.py)."""
    rows = list(Admission.objects.filter(ended_at__isnull=True).values_list(
        "workload_id", "cluster_id", "nodes")) + list(Admission.objects.filter(
            ended_at__isnull=False, cleaned_at__isnull=True, dispatched_at__isnull=False,
            end_reason__in=UNCONFIRMED_END_REASONS).values_list("workload_id", "cluster_id",
                                                                  "nodes"))
    per_pod: dict[int, list[int]] = defaultdict(list)
    for wid, count, gpus in PodSet.objects.filter(
            workload_id__in={r[0] for r in rows}).order_by("workload_id", "index").values_list(
            "workload_id", "count", "gpus"):
        per_pod[wid] += [gpus] * count
    used: dict[tuple[int, str], int] = defaultdict(int)
    for wid, cluster, nodes in rows:
        for node, gpus in zip(nodes, per_pod[wid], strict=False):
            used[(cluster, node)] += gpus
    return used


def _cluster_view() -> dict[tuple[int, str], int]:
    """GPUs per node of the simulated clusters' pods that are neither suspended nor done."""
    from scheduling.backends.simulated.models import SimJob

    now = timezone.now()
    used: dict[tuple[int, str], int] = defaultdict(int)
    for cluster, nodes, gpus, done_at in SimJob.objects.filter(suspended=False).values_list(
            "cluster_id", "nodes", "gpus_per_pod", "done_at"):
        if done_at is not None and done_at <= now:
            continue
        for node in nodes:
            used[(cluster, node)] += gpus
    return used


def leftovers() -> dict[str, int]:
    """What a settled system has none of, once every open workload was cancelled."""
    from scheduling.backends.simulated.models import SimJob
    from scheduling.models import OPEN_STATES, OutboxMessage

    now = timezone.now()
    with snapshot():
        running_jobs = sum(1 for done_at in SimJob.objects.filter(suspended=False).values_list(
            "done_at", flat=True) if done_at is None or done_at > now)
        return {
            "open workloads": Workload.objects.filter(state__in=OPEN_STATES).count(),
            "open admissions": Admission.objects.filter(ended_at__isnull=True).count(),
            "undelivered outbox rows": OutboxMessage.objects.filter(
                delivered_at__isnull=True).count(),
            "held admissions (delete unconfirmed)": Admission.objects.filter(
                ended_at__isnull=False, cleaned_at__isnull=True, dispatched_at__isnull=False,
                end_reason__in=UNCONFIRMED_END_REASONS).count(),
            "jobs still running on the clusters": running_jobs,
        }
