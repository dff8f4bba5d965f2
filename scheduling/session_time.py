"""A session's time limit: the stop when it is reached, the warning before, and the extension
in one click while the quota and the policies allow.

`sessions_time_limit` runs with the idle cull every minute (billing.cull_idle_sessions). A
running session whose open admission has run its time limit (`session_time_limit`:
its own, else its policy's longest) is stopped: cancelled with the end reason `time_limit`
(event `TIME_LIMIT_STOPPED`, an email), its quota released at once and its objects deleted
through the outbox, a volume it mounts kept. The limit is read again under the workload's lock,
so an extension committed meanwhile counts. A tenth of the limit before (at most 10 minutes)
its owner is warned once per limit: a `TIME_LIMIT_WARNING` event and an email (the page shows
a banner from then on) saying when it stops and how to extend it.

`session_extend` adds hours to an interactive session's time limit (`Workload.time_limit_s`,
the running time after which scheduling/sessions.py stops it). It is refused, with the reason
recorded as an `EXTENSION_REFUSED` policy event and nothing else changed, when:

- the session has ended, or is being preempted (a reclaim is under way);
- it runs on borrowed capacity that a pending workload has nominated for a reclaim;
- the new limit would pass the longest time its session policies allow (`max_time_s`);
- a registered check refuses (billing: a budget that blocks new work is in force).

An extension granted is a `SESSION_EXTENDED` policy event naming the new limit and when the
session now ends. The owner, a lead of its team or an admin may extend it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling import enqueue, extensions
from scheduling.locks import workload_writer
from scheduling.models import (
    TERMINAL_STATES,
    Admission,
    EndReason,
    EventCode,
    EventType,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.request.cancel import user_may_manage
from scheduling.sessions import (
    MAX_WARNING_S,
    IdleLimit,
    minutes_text,
    notify,
    running_since,
    session_idle_limit,
    session_stop,
    session_time_limit,
)
from scheduling.transitions import event_new

logger = logging.getLogger(__name__)

MAX_EXTENSION_H = 168  # one extension: at most a week

# Refusal codes (with a message naming the numbers).
ENDED = "SESSION_ENDED"
NO_TIME_LIMIT = "NO_TIME_LIMIT"
RECLAIM_PENDING = "RECLAIM_PENDING"
MAX_TIME = "SESSION_MAX_TIME"


@dataclass
class Extension:
    """What an extension did: the session, and either its new limit or the refusals."""

    workload: Workload
    time_limit_s: int | None = None
    ends_at: datetime | None = None
    refused: list[tuple[str, str]] = field(default_factory=list)


def _hours(value: Any) -> Decimal:
    """The hours asked for: a number above 0, at most a week, in steps of a minute."""
    try:
        hours = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ValidationError({"hours": [f"{value!r} is not a number of hours"]}) from None
    if isinstance(value, bool) or not hours.is_finite() or not 0 < hours <= MAX_EXTENSION_H:
        raise ValidationError({"hours": [
            f"{value} is not between 0 and {MAX_EXTENSION_H} hours (exclusive of 0)"]})
    return hours


def hours_text(seconds: int) -> str:
    """Seconds as hours, as people read them: 5400 -> "1.5 h"."""
    return f"{Decimal(seconds) / 3600:.2f}".rstrip("0").rstrip(".") + " h"


def _reclaim_pending(workload: Workload) -> str | None:
    """Why a reclaim is pending on it (None: none): being preempted, or its borrowed capacity
    nominated by a pending workload."""
    if workload.state == WorkloadState.PREEMPTING:
        return f"{workload.name} is being preempted: its capacity is being reclaimed"
    borrowed = Admission.objects.filter(workload=workload, ended_at__isnull=True,
                                        borrowed=True).exists()
    if not borrowed:
        return None
    for pk, name, nomination in Workload.objects.filter(
            state=WorkloadState.PENDING, nomination__isnull=False).values_list(
            "pk", "name", "nomination"):
        for victim in (nomination or {}).get("victims") or []:
            if victim.get("name") == workload.name and victim.get("queue") == (
                    workload.queue.path):
                return (f"{workload.name} runs on borrowed capacity that #{pk} {name} is "
                        "reclaiming")
    return None


def _refusals(workload: Workload, extra_s: int, now: datetime
              ) -> tuple[list[tuple[str, str]], int | None]:
    """The reasons the extension is refused, and the new limit."""
    if workload.state in TERMINAL_STATES:
        return [(ENDED, f"{workload.name} is {workload.state}: only a session that has not "
                 "ended can be extended")], None
    limit = session_idle_limit(workload)
    current, _ = session_time_limit(workload, limit)
    if current is None:
        return [(NO_TIME_LIMIT, f"{workload.name} has no time limit: nothing to extend")], None
    new = current + extra_s
    refused = []
    reclaim = _reclaim_pending(workload)
    if reclaim is not None:
        refused.append((RECLAIM_PENDING, reclaim))
    if limit.max_time_s is not None and new > limit.max_time_s:
        refused.append((MAX_TIME, (
            f"{hours_text(current)} + {hours_text(extra_s)} = {hours_text(new)} is over the "
            f"{hours_text(limit.max_time_s)} a session may run in {workload.queue.path} "
            f"({limit.sources.get('max_time_s', '')})")))
    refused += extensions.run_session_extension_checks(workload, extra_s, now)
    return refused, new


@transaction.atomic
def session_extend(*, user: Any, workload: Workload, hours: Any,
                   now: datetime | None = None) -> Extension:
    """Add `hours` to a session's time limit when the quota and the policies allow it (see
    the module); either way the decision is an event on its timeline."""
    extra_s = int(_hours(hours) * 3600)
    if not workload.interactive:
        raise ValidationError({"hours": [f"{workload.name} is not an interactive session: "
                                         "only a session has a time limit to extend"]})
    if not user_may_manage(user, workload):
        raise PermissionDenied(f"only the owner, a lead of its team or an admin may extend "
                               f"{workload.name}")
    now = now or timezone.now()
    with workload_writer():
        locked = Workload.objects.select_for_update(of=("self",)).select_related(
            "queue", "owner", "team").get(pk=workload.pk)
        refused, new = _refusals(locked, extra_s, now)
        out = Extension(workload=locked, refused=refused)
        if refused:
            event_new(locked, EventType.POLICY, at=now, code=EventCode.EXTENSION_REFUSED,
                      actor=user, message=f"extension by {hours_text(extra_s)} refused: "
                      + "; ".join(m for _, m in refused),
                      payload={"hours": extra_s / 3600,
                               "reasons": [{"code": c, "message": m} for c, m in refused]}
                      ).save()
            return out
        assert new is not None
        locked.time_limit_s = new
        locked.save(update_fields=["time_limit_s"])
        since = running_since([locked.pk]).get(locked.pk)
        out.time_limit_s = new
        out.ends_at = since + timedelta(seconds=new) if since is not None else None
        ends = f"; it now ends at {out.ends_at:%H:%M} UTC" if out.ends_at else ""
        event_new(locked, EventType.POLICY, at=now, code=EventCode.SESSION_EXTENDED,
                  actor=user, message=f"time limit extended by {hours_text(extra_s)} to "
                  f"{hours_text(new)}{ends}",
                  payload={"hours": extra_s / 3600, "time_limit_s": new,
                           "ends_at": out.ends_at.isoformat() if out.ends_at else None}).save()
    return out


def warning_lead_s(time_limit: int) -> int:
    """How long before its time limit a session's owner is warned."""
    return min(MAX_WARNING_S, time_limit // 10)


@dataclass
class TimeLimitReport:
    """What one pass did: sessions warned of their time limit, and stopped at it."""

    warned: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)


def _stop(workload: Workload, time_limit: int, source: str, now: datetime) -> None:
    message = (f"stopped at its time limit: {minutes_text(time_limit)} of running ({source}); "
               "extend it before it ends to carry on")
    session_stop(workload, now=now, code=EventCode.TIME_LIMIT_STOPPED,
                 reason=EndReason.TIME_LIMIT, message=message,
                 payload={"time_limit_s": time_limit, "source": source},
                 subject=f"Session {workload.name} reached its time limit",
                 body=f"{workload.name} in {workload.queue.path} was {message}. Its files on "
                 "its volume are kept: resubmit it to carry on.")


def _warn(workload: Workload, time_limit: int, ends_at: datetime, now: datetime) -> bool:
    """Warn once per limit (False: already warned of this one)."""
    if WorkloadEvent.objects.filter(workload=workload, code=EventCode.TIME_LIMIT_WARNING,
                                    payload__time_limit_s=time_limit).exists():
        return False
    left = max(0, int((ends_at - now).total_seconds()))
    message = (f"time limit: it will be stopped in {minutes_text(left)} ({ends_at:%H:%M} UTC) "
               f"after {hours_text(time_limit)} of running, unless it is extended")
    event_new(workload, EventType.POLICY, at=now, code=EventCode.TIME_LIMIT_WARNING,
              message=message, payload={"time_limit_s": time_limit,
                                        "ends_at": ends_at.isoformat()}).save()
    transaction.on_commit(lambda: notify(
        workload, f"Session {workload.name} reaches its time limit soon",
        f"{workload.name} in {workload.queue.path}: {message} (its page's Extend buttons, or "
        f"allot extend {workload.pk} --hours N). Files on its volume are kept."))
    return True


def sessions_time_limit(*, now: datetime | None = None) -> TimeLimitReport:
    """One pass over the running sessions with a time limit: warn, stop (see the module)."""
    now = now or timezone.now()
    report = TimeLimitReport()
    sessions = list(Workload.objects.filter(
        interactive=True, state=WorkloadState.RUNNING).select_related("queue", "owner"))
    since = running_since(w.pk for w in sessions)
    cache: dict[tuple[int, str], IdleLimit] = {}
    for workload in sessions:
        start = since.get(workload.pk)
        if start is None:
            continue
        limit = session_idle_limit(workload, cache=cache)
        time_limit, _ = session_time_limit(workload, limit)
        if time_limit is None or (now - start).total_seconds() < (
                time_limit - warning_lead_s(time_limit)):
            continue
        with transaction.atomic(), workload_writer():
            locked = Workload.objects.select_for_update().select_related(
                "queue", "owner").get(pk=workload.pk)
            time_limit, source = session_time_limit(locked, limit)
            if locked.state != WorkloadState.RUNNING or time_limit is None:
                continue
            ran = (now - start).total_seconds()
            if ran >= time_limit:
                _stop(locked, time_limit, source, now)
                report.stopped.append(locked.pk)
                logger.info("session %s (%s) stopped at its time limit of %s s", locked.pk,
                            locked.name, time_limit)
            elif ran >= time_limit - warning_lead_s(time_limit) and _warn(
                    locked, time_limit, start + timedelta(seconds=time_limit), now):
                report.warned.append(locked.pk)
    if report.stopped:
        enqueue.cycle_nudge()
    return report
