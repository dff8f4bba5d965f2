"""The scheduling cycle on the database: lock, snapshot, engine, decisions written in bulk.

One cycle at a time across every worker and machine (`scheduling.locks.scheduling_lock`).
Everything a cycle writes happens in the lock's transaction, so a crash anywhere leaves the
database as it was.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import db
from scheduling import engine, enqueue, extensions, outbox, tallies
from scheduling.engine.engine import schedule
from scheduling.fleet import dispatch as fleet_dispatch
from scheduling.locks import scheduling_lock
from scheduling.models import (
    Admission,
    EndReason,
    EventType,
    OutboxMessage,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.transitions import (
    STATE_FIELDS,
    event_new,
    workload_transition,
)
from scheduling.workers.reason_events import reason_events
from scheduling.workers.rows import SnapshotParts
from scheduling.workers.snapshot import build_snapshot, dt, nomination_json

logger = logging.getLogger(__name__)
S = WorkloadState

@dataclass
class CycleReport:
    """What a cycle did (for logs, tests and the benchmark)."""

    ran: bool
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)  # refused by a cluster joining the cycle
    # Decisions dropped: their workloads' state moved since the snapshot (compare-and-set).
    superseded: list[int] = field(default_factory=list)
    pending: int = 0
    seconds: float = 0.0
    guarantee_blocked: list[str] = field(default_factory=list)  # leaf paths (engine's view)
    dispatch_clusters: set[int] = field(default_factory=set)
    suspend_admissions: list[int] = field(default_factory=list)
    delete_admissions: list[int] = field(default_factory=list)
    # The cluster calls these decisions need, written to the outbox with them.
    outbox_rows: list[OutboxMessage] = field(default_factory=list, repr=False)


def cycle_run(*, now: datetime | None = None, wait: bool = False,
              after_snapshot: Any = None, enqueue_dispatch: bool = True) -> CycleReport:
    """Run one scheduling cycle under the lock; skip (ran=False) if another cycle runs.

    The suspends, deletes and (with `enqueue_dispatch`) dispatch passes its decisions need are
    outbox rows written in its transaction (one insert), delivered by the workers after
    commit. Without `enqueue_dispatch` the caller dispatches `report.dispatch_clusters`.

    `after_snapshot` is a test hook called between the engine and the writes (to inject a
    crash); the whole cycle is one transaction, so a crash leaves nothing half-written.
    """
    started = time.monotonic()
    with scheduling_lock(wait=wait) as got:
        if not got:
            return CycleReport(ran=False)
        now = now or timezone.now()
        report = CycleReport(ran=True)
        _requeue_expired_grace(now, report)
        snapshot, parts = build_snapshot(now)
        result = schedule(snapshot)
        if after_snapshot is not None:
            after_snapshot(snapshot, result)
        _apply(now, result, parts, report)
        report.guarantee_blocked = result.guarantee_blocked
        report.pending = len(snapshot.pending) - len(report.admitted) - len(report.rejected)
        if enqueue_dispatch:
            report.outbox_rows += [outbox.message_dispatch(cluster_id=pk, at=now)
                                   for pk in sorted(report.dispatch_clusters)]
        outbox.messages_write(report.outbox_rows)
        if report.refused:
            transaction.on_commit(enqueue.cycle_nudge)  # placed elsewhere by the next cycle
        # In /metrics' histogram, written with the decisions (no commit of its own): its
        # duration up to the commit.
        tallies.cycle_observe(time.monotonic() - started)
    report.seconds = time.monotonic() - started
    return report


def _delete(adm: Admission, now: datetime, report: CycleReport) -> None:
    """The ended admission's objects are deleted after commit (through the outbox)."""
    report.delete_admissions.append(adm.pk)
    report.outbox_rows.append(outbox.message_delete(admission_id=adm.pk,
                                                    cluster_id=adm.cluster_id, at=now))


def _requeue_expired_grace(now: datetime, report: CycleReport) -> None:
    """Victims whose grace period ended go back to the queue, keeping their submit time."""
    victims = list(Workload.objects.filter(state=S.PREEMPTING, preempt_deadline__lte=now)
                   .select_for_update().order_by("pk"))
    if not victims:
        return
    admissions = {a.workload_id: a for a in Admission.objects.filter(
        workload__in=victims, ended_at__isnull=True)}
    events, closed = [], []
    for w in victims:
        adm = admissions.get(w.pk)
        ran = 0.0
        if adm is not None:
            adm.ended_at, adm.end_reason = now, EndReason.PREEMPTED
            closed.append(adm)
            _delete(adm, now, report)
            if adm.running_at is not None and w.checkpoint:
                # Progress counts up to the preemption decision; the grace is for saving.
                decided = (w.preempt_deadline or now) - timedelta(seconds=w.termination_grace_s)
                ran = max(0.0, (decided - adm.running_at).total_seconds())
        if w.checkpoint:
            w.progress_s += ran
        else:
            w.progress_s = 0.0
        events.append(workload_transition(
            w, S.PENDING, at=now, event_type=EventType.REQUEUED,
            message=f"requeued after preemption (grace {w.termination_grace_s}s over); "
            f"progress kept {w.progress_s:.0f}s" if w.checkpoint else
            "requeued after preemption; no checkpoint, restarts from the beginning",
            payload={"progress_s": w.progress_s}))
        w.preempt_deadline = None
        report.requeued.append(w.pk)
    db.bulk_set(Admission, closed, ["ended_at", "end_reason"])
    db.bulk_set(Workload, victims, [*STATE_FIELDS, "progress_s", "preempt_deadline"])
    db.insert_rows(WorkloadEvent, events)


# Per process: when a waiting workload's reason message (same code, numbers moved) was last
# written. Its numbers move with every admission around it; rewriting every head of every
# queue each cycle costs more than the cycle, so the message is refreshed at most every
# `reason_refresh_s` (a new code is always written, with its event).
_reason_written: dict[int, float] = {}


def _reason_refresh_due(workload_id: int) -> bool:
    now = time.monotonic()
    every = float(settings.ALLOT_WORKERS["reason_refresh_s"])
    if now - _reason_written.get(workload_id, -every) < every:
        return False
    if len(_reason_written) > 100_000:
        _reason_written.clear()
    _reason_written[workload_id] = now
    return True


@dataclass
class _Writes:
    """What one cycle writes, gathered from its decisions and written in bulk at the end."""

    events: list[WorkloadEvent] = field(default_factory=list)
    changed: dict[int, Workload] = field(default_factory=dict)
    new_admissions: list[Admission] = field(default_factory=list)
    closed: list[Admission] = field(default_factory=list)


def _apply(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
           report: CycleReport) -> None:
    """Write the engine's decisions: bulk inserts and updates, in the caller's transaction.

    Compare-and-set: the workloads whose state the decisions change (and the preemptors their
    preemptions and nominations are for) are locked and read again first; a decision about a
    workload whose state moved since the snapshot (a user cancelled it, a cluster reported it
    running or ended) is dropped, so nothing the cycle computed is written over a newer state
    (nor a reason on a workload that no longer waits).
    User actions do not wait for a cycle's engine, only for its writes to the rows they touch.
    """
    result = _still_as_read(result, parts, report)
    out = _Writes()
    _admitted(now, result, parts, report, out)
    if out.new_admissions:
        # Clusters whose state lives in this database start their workloads in this
        # transaction (phase two without a trip through the broker).
        fleet_dispatch.dispatch_in_cycle(now=now, admissions=out.new_admissions, parts=parts,
                                         events=out.events, report=report)
    _preempted(now, result, parts, report, out)
    _rejected(now, result, parts, report, out)
    _released(now, result, parts, report, out)
    moved = set(out.changed)  # rows whose state changed; the rest only get a new reason
    # (or a nomination begun or ended: their preemptor stays pending)
    _reasons(now, result, parts, out)
    _nominations(result, parts, out)
    report.outbox_rows += reason_events(now, out.events)

    if out.closed:
        db.bulk_set(Admission, out.closed, ["ended_at", "end_reason"])
    db.insert_rows(Admission, out.new_admissions)
    reasons_only = [w for pk, w in out.changed.items() if pk not in moved]
    moved_rows = [w for pk, w in out.changed.items() if pk in moved]
    db.bulk_set(Workload, reasons_only, ["reason_code", "reason_message", "nomination"])
    db.bulk_set(Workload, moved_rows,
                [*STATE_FIELDS, "reason_code", "reason_message", "preempt_deadline",
                 "preempt_kind", "preempted_by", "not_before", "backoff_count", "nomination"])
    db.insert_rows(WorkloadEvent, out.events)
    extensions.events_written([e for e in out.events if e.type == EventType.PREEMPTED])


def _still_as_read(result: engine.CycleResult, parts: SnapshotParts,
                   report: CycleReport) -> engine.CycleResult:
    """`result` without the decisions about workloads whose state moved since the snapshot;
    the rest are locked (FOR UPDATE, in id order) until the cycle commits. A waiting
    workload whose reason may be written (a new code or message) is one of them: a reason
    and its event are never written on a workload a user cancelled meanwhile."""
    names = {a.workload for a in result.admitted} | {r.workload for r in result.rejected} \
        | {r.workload for r in result.released} | set(result.nominations) \
        | {p.workload for p in result.preempted} | {p.by for p in result.preempted} \
        | {n for n, r in result.reasons.items() if n in parts.rows and (
            str(r.code) != parts.rows[n]["reason_code"]
            or r.message != parts.rows[n]["reason_message"])}
    read = {int(n): parts.rows[n]["state"] for n in names if n in parts.rows}
    if not read:
        return result
    now_state = dict(Workload.objects.filter(pk__in=db.in_array(list(read), "bigint"))
                     .order_by("pk")
                     .select_for_update().values_list("pk", "state"))
    moved = {str(pk) for pk, state in read.items() if now_state.get(pk) != state}
    if not moved:
        return result
    report.superseded = sorted(int(n) for n in moved)
    logger.info("cycle: %d decision(s) dropped, their workloads moved since the snapshot: %s",
                len(moved), report.superseded)
    return dataclasses.replace(
        result,
        admitted=[a for a in result.admitted if a.workload not in moved],
        rejected=[r for r in result.rejected if r.workload not in moved],
        released=[r for r in result.released if r.workload not in moved],
        preempted=[p for p in result.preempted
                   if p.workload not in moved and p.by not in moved],
        nominations={n: v for n, v in result.nominations.items() if n not in moved},
        reasons={n: v for n, v in result.reasons.items() if n not in moved})


def _admitted(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
              report: CycleReport, out: _Writes) -> None:
    """Admissions: reserved, with a new admission interval each."""
    for adm in result.admitted:
        w = parts.known(adm.workload)
        cluster = parts.clusters[adm.cluster]
        out.events.append(workload_transition(
            w, S.RESERVED, at=now, event_type=EventType.ADMITTED,
            message=f"admitted on {adm.cluster} ({adm.flavor}, {len(adm.nodes)} pods"
            f"{', borrowed' if adm.borrowed else ''}): reserving",
            payload={"cluster": adm.cluster, "flavor": adm.flavor, "borrowed": adm.borrowed,
                     "nodes": list(adm.nodes)}))
        w.reason_code, w.reason_message = "", ""
        out.changed[w.pk] = w
        out.new_admissions.append(Admission(
            workload=w, cluster=cluster, flavor_id=parts.flavors[adm.flavor],
            nodes=list(adm.nodes), cards=list(adm.cards), borrowed=adm.borrowed,
            gpus=Decimal(str(round(adm.gpus, 3))),
            cpu=Decimal(str(adm.cpu)), memory_gib=Decimal(str(adm.memory_gib)),
            reserved_at=now))
        report.admitted.append(w.pk)
        report.dispatch_clusters.add(cluster.pk)


def _preempted(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
               report: CycleReport, out: _Writes) -> None:
    """Preemptions: preempting until the grace period ends, their Jobs suspended."""
    for pre in result.preempted:
        w = parts.known(pre.workload)
        by = parts.workload(pre.by)
        out.events.append(workload_transition(
            w, S.PREEMPTING, at=now, event_type=EventType.PREEMPTED, code=str(pre.reason.code),
            message=pre.reason.message,
            payload={"kind": str(pre.kind), "by": int(pre.by) if pre.by.isdigit() else pre.by,
                     "by_name": by.name if by else "", "grace_until": pre.grace_until}))
        w.preempt_deadline = dt(pre.grace_until)
        w.preempt_kind = str(pre.kind)
        w.preempted_by = by
        out.changed[w.pk] = w
        report.preempted.append(w.pk)
        adm_row = parts.admissions.get(pre.workload)
        if adm_row is not None:
            report.suspend_admissions.append(adm_row.pk)
            report.outbox_rows.append(outbox.message_suspend(
                admission_id=adm_row.pk, cluster_id=adm_row.cluster_id, at=now,
                reason=pre.reason.message))


def _nominations(result: engine.CycleResult, parts: SnapshotParts, out: _Writes) -> None:
    """Nominations that began or ended: stored on their preemptor (or cleared), so the next
    cycles keep the capacity its victims free for it."""
    for name, nom in result.nominations.items():
        w = parts.known(name)
        w.nomination = nomination_json(nom) if nom is not None else None
        out.changed[w.pk] = w


def _rejected(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
              report: CycleReport, out: _Writes) -> None:
    """Rejections: rejected, with one reason event per reason."""
    for rej in result.rejected:
        w = parts.known(rej.workload)
        out.events.append(workload_transition(
            w, S.REJECTED, at=now, event_type=EventType.REJECTED,
            code=str(rej.reasons[0].code) if rej.reasons else "",
            message=f"rejected: {len(rej.reasons)} reason(s)"))
        out.events += [event_new(w, EventType.REASON, at=now, code=str(r.code),
                                 message=r.message) for r in rej.reasons]
        if rej.reasons:
            w.reason_code, w.reason_message = str(rej.reasons[0].code), rej.reasons[0].message
        out.changed[w.pk] = w
        report.rejected.append(w.pk)


def _released(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
              report: CycleReport, out: _Writes) -> None:
    """Pods-ready timeouts: back to pending with a backoff, the interval ended."""
    for rel in result.released:
        w = parts.known(rel.workload)
        adm_row = parts.admissions.get(rel.workload)
        if adm_row is not None:
            adm_row.ended_at, adm_row.end_reason = now, EndReason.PODS_READY_TIMEOUT
            out.closed.append(adm_row)
            _delete(adm_row, now, report)
        out.events.append(workload_transition(
            w, S.PENDING, at=now, event_type=EventType.TIMEOUT, code=str(rel.reason.code),
            message=rel.reason.message,
            payload={"backoff_count": rel.backoff_count, "not_before": rel.not_before}))
        w.not_before = dt(rel.not_before)
        w.backoff_count = rel.backoff_count
        w.reason_code, w.reason_message = str(rel.reason.code), rel.reason.message
        out.changed[w.pk] = w
        report.released.append(w.pk)


def _reasons(now: datetime, result: engine.CycleResult, parts: SnapshotParts,
             out: _Writes) -> None:
    """Why the pending ones still wait: a new code is recorded with an event; a moved number
    under the same code is refreshed at most every `reason_refresh_s`."""
    for name, reason in result.reasons.items():
        row = parts.rows.get(name)
        if row is None or row["state"] != S.PENDING or name in parts.workloads and \
                parts.workloads[name].state != S.PENDING:
            continue
        code = str(reason.code)
        if code == row["reason_code"] and (
                reason.message == row["reason_message"]
                or not _reason_refresh_due(row["id"])):
            continue
        w = parts.known(name)
        if code != w.reason_code:
            # The same code in consecutive cycles is recorded once (its numbers may move).
            out.events.append(event_new(w, EventType.REASON, at=now, code=code,
                                        message=reason.message))
        if code != w.reason_code or reason.message != w.reason_message:
            w.reason_code, w.reason_message = code, reason.message
            out.changed[w.pk] = w
