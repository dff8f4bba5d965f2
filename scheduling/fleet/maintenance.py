"""Maintenance: cluster objects of ended workloads deleted after a TTL, and workloads stuck in
a state past its limit reclaimed, each with an event and a log line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from core import db
from scheduling import enqueue, extensions, outbox
from scheduling.backends.base import (
    BackendError,
)
from scheduling.fleet.refs import (
    cleanup_ttl_s,
)
from scheduling.fleet.teardown import admission_delete
from scheduling.locks import (
    scheduling_lock,
)
from scheduling.models import (
    Admission,
    EndReason,
    EventCode,
    EventType,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.transitions import (
    event_new,
    workload_transition,
)

logger = logging.getLogger(__name__)
S = WorkloadState


@dataclass
class MaintainReport:
    """What a maintenance pass cleaned and reclaimed."""

    cleaned: list[int] = field(default_factory=list)
    reclaimed: list[int] = field(default_factory=list)  # every stuck workload, any state
    requeued: list[int] = field(default_factory=list)  # of those, back in the queue
    failed: list[int] = field(default_factory=list)  # of those, failed for good


# Per non-terminal state: the setting (in ALLOT_WORKERS) naming its limit, and where a workload
# stuck in it goes. Reserved and preempting are moments that should pass on their own: a
# workload stuck there is requeued. Pending and running can last, but not forever: past their
# limit the workload fails with the reason (its quota and capacity are reclaimed).
STUCK_RULES: dict[str, tuple[str, str]] = {
    S.PENDING: ("stuck_pending_s", S.FAILED),
    S.RESERVED: ("stuck_reserved_s", S.PENDING),
    S.RUNNING: ("stuck_running_s", S.FAILED),
    S.PREEMPTING: ("stuck_preempting_s", S.PENDING),
}


def stuck_limit_s(state: str) -> float:
    """How long a workload may stay in `state` before it is reclaimed as stuck (inf: never;
    a limit set to 0 or less turns it off)."""
    conf = settings.ALLOT_WORKERS
    timeout = float(settings.ALLOT_ENGINE["pods_ready_timeout_s"])
    defaults: dict[str, float] = {
        S.PENDING: 7 * 86400.0,
        # The engine releases reserved work at the pods-ready timeout; twice that means the
        # release itself did not happen (e.g. the cycle kept failing on this workload).
        S.RESERVED: 2 * timeout + 60,
        S.RUNNING: 7 * 86400.0,
        # Requeue happens at the end of grace; past this, the victim did not yield.
        S.PREEMPTING: float(conf["preempting_stuck_s"]),
    }
    if state not in STUCK_RULES:
        return float("inf")
    value = conf.get(STUCK_RULES[state][0])
    limit = defaults[state] if value is None else float(value)
    return limit if limit > 0 else float("inf")


def _human(seconds: float) -> str:
    """Seconds, and days or hours beside them when that many."""
    if seconds >= 2 * 86400:
        return f"{seconds:.0f}s ({seconds / 86400:.1f} days)"
    if seconds >= 2 * 3600:
        return f"{seconds:.0f}s ({seconds / 3600:.1f} h)"
    return f"{seconds:.0f}s"


def workloads_maintain(*, now: datetime | None = None) -> MaintainReport:
    """Clean up ended admissions past the TTL; reclaim workloads stuck past their limit."""
    given, now = now, now or timezone.now()
    report = MaintainReport()
    expired = Admission.objects.filter(
        ended_at__lte=now - timedelta(seconds=cleanup_ttl_s()), cleaned_at__isnull=True,
        dispatched_at__isnull=False).values_list("pk", flat=True)[:200]
    for pk in list(expired):
        try:
            admission_delete(admission_id=pk, now=now)
            report.cleaned.append(pk)
        except BackendError as exc:
            logger.warning("cleanup of admission %s failed: %s", pk, exc)
    Admission.objects.filter(ended_at__isnull=False, cleaned_at__isnull=True,
                             dispatched_at__isnull=True).update(cleaned_at=now)

    for state in STUCK_RULES:
        limit_s = stuck_limit_s(state)
        if limit_s == float("inf"):
            continue
        limit = now - timedelta(seconds=limit_s)
        candidates = list(Workload.objects.filter(state=state, state_changed_at__lt=limit)
                          .values_list("pk", flat=True)[:1000])
        if candidates:
            with scheduling_lock(wait=True):
                # The clock is read once the lock is held (after what a cycle wrote).
                _reclaim_stuck(state, candidates, limit_s, given or timezone.now(), report)
    if report.reclaimed:
        enqueue.cycle_nudge()
    return report


def _reclaim_stuck(state: str, candidates: list[int], limit_s: float, now: datetime,
                   report: MaintainReport) -> None:
    """Under the scheduling lock: move the workloads still stuck in `state` on, end their
    open admission (capacity reclaimed), record why; their Jobs are deleted after commit
    (outbox rows written here)."""
    setting, to = STUCK_RULES[state]
    limit = now - timedelta(seconds=limit_s)
    stuck = list(Workload.objects.select_for_update().filter(
        pk__in=candidates, state=state, state_changed_at__lt=limit).order_by("pk"))
    if not stuck:
        return
    admissions = {a.workload_id: a for a in Admission.objects.select_for_update().filter(
        workload__in=stuck, ended_at__isnull=True)}
    closed, events = [], []
    code = EventCode(f"STUCK_{state.upper()}")
    for w in stuck:
        adm = admissions.get(w.pk)
        if adm is not None:
            adm.ended_at, adm.end_reason, adm.forced = now, EndReason.RECLAIMED_STUCK, adm.borrowed
            closed.append(adm)
        stayed = (now - w.state_changed_at).total_seconds()
        outcome = "back in the queue" if to == S.PENDING else "failed"
        message = (f"stuck in {state} for {_human(stayed)}, more than the {_human(limit_s)} "
                   f"limit (ALLOT_{setting.upper()}): "
                   + ("capacity reclaimed, " if adm is not None else "") + outcome)
        events.append(event_new(w, EventType.RECLAIMED, at=now, code=code, message=message,
                                payload={"state": state, "stayed_s": round(stayed, 1),
                                         "limit_s": limit_s}))
        events.append(workload_transition(
            w, to, at=now, event_type=EventType.REQUEUED if to == S.PENDING else EventType.FAILED,
            code=code, message=message))
        w.preempt_deadline = None
        w.reason_code, w.reason_message = code, message
        logger.error("workload %s (%s): %s", w.pk, w.name, message)
        report.reclaimed.append(w.pk)
        (report.requeued if to == S.PENDING else report.failed).append(w.pk)
    db.bulk_set(Admission, closed, ["ended_at", "end_reason", "forced"])
    db.bulk_set(Workload, stuck, ["state", "state_changed_at", "finished_at", "preempt_deadline",
                               "reason_code", "reason_message"])
    WorkloadEvent.objects.bulk_create(events)
    extensions.events_written(events)
    outbox.messages_write([outbox.message_delete(admission_id=a.pk, cluster_id=a.cluster_id,
                                                 at=now)
                           for a in closed if a.dispatched_at is not None])
