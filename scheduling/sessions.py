"""Interactive sessions (notebooks): stopped when their GPUs stay idle or at their time limit.

A session is a workload submitted with `interactive: true` (the portal's "Notebook" request: a
JupyterLab or VS Code server image and GPUs). Its limits (idle timeout, idle threshold, the
longest time limit) are resolved setting by setting: the most specific source that sets one
wins, a session policy naming the owner (policies/sessions.py) before any that does not, then
the deepest queue path (a queue's own `idle_timeout_s` / `idle_gpu_util_pct` and its
ancestors' count at their depth, a policy winning at the same depth; equally specific policies:
the stricter value). The threshold defaults to 5 %. Its own `idle_timeout_s` applies when
shorter; with no timeout anywhere it is never stopped idle.

Its time limit is its own `time_limit_s` (extensions included), capped by the longest its
policies allow, else that longest; with neither it has none (`session_time_limit`; the stop at
the limit, its warning and the extension are in session_time.py).

`sessions_cull` runs every minute (billing.cull_idle_sessions, which reads the telemetry as
metering does: DCGM through Prometheus, else a simulated cluster's exporter directly). Each
run reads every running session's GPU utilisation over the last minute, its busiest GPU:

- at or above the threshold: it is busy (`idle_since` and any warning cleared);
- below: idle since the first quiet reading (`idle_since`);
- no reading (telemetry down, no GPU, pods not in the series yet): nothing changes, so a
  telemetry outage never stops a session.

A session idle for its limit less the warning lead (a tenth of the limit, at most 10
minutes) gets a warning: an event on its timeline (the workload page shows it as a banner) and
an email to its owner. Idle for its whole limit, it is stopped: cancelled with the end reason
`idle`, its quota released at once and its objects deleted through the outbox (a volume it
mounts is not deleted: its files are kept).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from quotas.models import Queue
from scheduling import enqueue, extensions, kinds, outbox
from scheduling.locks import workload_writer
from scheduling.models import EndReason, EventCode, EventType, Workload, WorkloadState
from scheduling.transitions import admission_close, event_new, workload_transition

logger = logging.getLogger(__name__)

DEFAULT_IDLE_PCT = 5
MAX_WARNING_S = 600

# Per running session: the utilisation (percent) of its busiest GPU over the last minute;
# a session missing from the answer has no reading.
Utilisation = Callable[[list[Workload]], Mapping[int, Decimal]]


@dataclass(frozen=True)
class IdleLimit:
    """When a session is stopped: idle for `timeout_s` (None: never) below `threshold_pct`;
    the longest time limit it may have (`max_time_s`, None: any); where each value comes from
    (`sources`: setting -> "queue rd/vision", "policy night-owls", "default", ...)."""

    timeout_s: int | None
    threshold_pct: int = DEFAULT_IDLE_PCT
    max_time_s: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def warning_s(self) -> int:
        """How long before the stop the owner is warned."""
        return min(MAX_WARNING_S, (self.timeout_s or 0) // 10)


# A candidate value: (names the user, queue depth, set by a policy), the value, its source.
_Candidate = tuple[tuple[bool, int, bool], int, str]


def _pick(candidates: list[_Candidate], stricter: Callable[[list[int]], int]
          ) -> tuple[int, str] | None:
    """The most specific candidate's value; among equally specific ones, the stricter."""
    if not candidates:
        return None
    best = max(c[0] for c in candidates)
    tied = [c for c in candidates if c[0] == best]
    value = stricter([c[1] for c in tied])
    return value, next(c[2] for c in tied if c[1] == value)


def queue_idle_limit(queue: Queue, *, username: str = "",
                     cache: dict[tuple[int, str], IdleLimit] | None = None) -> IdleLimit:
    """The session limits of `username` in `queue`: for each setting, the most specific source
    that sets it (see the module): a session policy naming the user before one that does not,
    then the deepest queue path (the queue's own settings and its ancestors' count at their
    depth; a policy wins over the queue's setting at the same depth)."""
    key = (queue.pk, username)
    if cache is not None and key in cache:
        return cache[key]
    parts = queue.path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    rows = {p: (t, pct) for p, t, pct in Queue.objects.filter(path__in=prefixes).values_list(
        "path", "idle_timeout_s", "idle_gpu_util_pct")}
    timeouts: list[_Candidate] = []
    pcts: list[_Candidate] = []
    longest: list[_Candidate] = []
    for depth, prefix in enumerate(prefixes, start=1):
        t, p = rows.get(prefix, (None, None))
        if t is not None:
            timeouts.append(((False, depth, False), int(t), f"queue {prefix}"))
        if p is not None:
            pcts.append(((False, depth, False), int(p), f"queue {prefix}"))
    for rule in extensions.session_rules(queue.path, username):
        rank = (rule.user_specific, rule.depth, True)
        if rule.idle_timeout_s is not None:
            timeouts.append((rank, rule.idle_timeout_s, rule.source))
        if rule.idle_gpu_util_pct is not None:
            pcts.append((rank, rule.idle_gpu_util_pct, rule.source))
        if rule.max_time_s is not None:
            longest.append((rank, rule.max_time_s, rule.source))
    timeout, pct, most = _pick(timeouts, min), _pick(pcts, max), _pick(longest, min)
    limit = IdleLimit(
        timeout_s=timeout[0] if timeout else None,
        threshold_pct=pct[0] if pct else DEFAULT_IDLE_PCT,
        max_time_s=most[0] if most else None,
        sources={"timeout_s": timeout[1] if timeout else "none set",
                 "threshold_pct": pct[1] if pct else "default",
                 "max_time_s": most[1] if most else "none set"})
    if cache is not None:
        cache[key] = limit
    return limit


def session_idle_limit(workload: Workload, *,
                       cache: dict[tuple[int, str], IdleLimit] | None = None) -> IdleLimit:
    """A session's limits: its queue's and policies' (`queue_idle_limit`), with its own idle
    timeout when that is shorter (or the only one)."""
    queue = queue_idle_limit(workload.queue, username=workload.owner.username, cache=cache)
    own = workload.idle_timeout_s
    if own is None or (queue.timeout_s is not None and queue.timeout_s <= own):
        return queue
    return replace(queue, timeout_s=own,
                   sources={**queue.sources, "timeout_s": "the session's own"})


def session_time_limit(workload: Workload, limit: IdleLimit) -> tuple[int | None, str]:
    """A session's time limit (seconds of running; None: none) and where it comes from: its
    own (extensions included), capped by its policy's longest, else that longest."""
    own, most = workload.time_limit_s, limit.max_time_s
    if own is not None and (most is None or own <= most):
        return own, "the session's own"
    if most is not None:
        return most, limit.sources.get("max_time_s", "")
    return None, "none set"


def running_since(workload_ids: Iterable[int]) -> dict[int, datetime]:
    """When each workload's open admission started running (those running only)."""
    from scheduling.models import Admission

    return {wid: at for wid, at in Admission.objects.filter(
        workload_id__in=list(workload_ids), ended_at__isnull=True,
        running_at__isnull=False).values_list("workload_id", "running_at") if at is not None}


def session_idle_state(workload: Workload, now: datetime | None = None) -> dict[str, Any] | None:
    """What the workload page and the API show of a session's limits and idling (None: not a
    session): the effective values and where each comes from."""
    if not workload.interactive:
        return None
    now = now or timezone.now()
    limit = session_idle_limit(workload)
    running = workload.state == WorkloadState.RUNNING
    stop_at = None
    if workload.idle_since is not None and limit.timeout_s is not None:
        stop_at = workload.idle_since + timedelta(seconds=limit.timeout_s)
    time_limit, time_source = session_time_limit(workload, limit)
    since = running_since([workload.pk]).get(workload.pk) if running else None
    ends_at = (since + timedelta(seconds=time_limit)
               if since is not None and time_limit is not None else None)
    return {
        "timeout_s": limit.timeout_s, "threshold_pct": limit.threshold_pct,
        "idle_since": workload.idle_since, "warned_at": workload.idle_warned_at,
        "stops_at": stop_at if running else None,
        "idle_s": int((now - workload.idle_since).total_seconds())
        if workload.idle_since is not None and running else None,
        "time_limit_s": time_limit, "max_time_s": limit.max_time_s,
        "running_since": since, "ends_at": ends_at,
        # Within the warning lead of its time limit (session_time.py warns then).
        "ends_soon": ends_at is not None and time_limit is not None
        and (ends_at - now).total_seconds() <= min(MAX_WARNING_S, time_limit // 10),
        "sources": {**limit.sources, "time_limit_s": time_source},
    }


def session_connect(workload: Workload) -> str:
    """The `kubectl port-forward` line that reaches a session's server (port 8888: Jupyter's;
    a VS Code server image listens where its command says)."""
    from scheduling.backends.naming import LABEL_OBJECT, job_name

    namespace = workload.queue.namespace or workload.queue.path.replace("/", "-")
    name = (workload.labels or {}).get(LABEL_OBJECT) or job_name(workload.pk, 0)
    kind = kinds.kind_named(workload.kind)
    resource = (kind.kind.lower() if kind is not None else "job")
    return f"kubectl port-forward -n {namespace} {resource}/{name} 8888:8888"


@dataclass
class CullReport:
    """What one run did: sessions read, found busy or idle, warned, stopped."""

    sessions: int = 0
    read: int = 0
    busy: int = 0
    idle: int = 0
    warned: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)


def minutes_text(seconds: int) -> str:
    """Seconds as people read them: 1800 -> "30 min", 90 -> "90 s"."""
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def notify(workload: Workload, subject: str, body: str) -> None:
    """Email a session's owner (if they have an address; a mail failure is ignored)."""
    if workload.owner.email:
        send_mail(subject, body, None, [workload.owner.email], fail_silently=True)


def _warn(workload: Workload, limit: IdleLimit, util: Decimal, now: datetime) -> None:
    assert workload.idle_since is not None and limit.timeout_s is not None
    stop_at = workload.idle_since + timedelta(seconds=limit.timeout_s)
    left = max(0, int((stop_at - now).total_seconds()))
    message = (f"idle: its GPUs below {limit.threshold_pct}% since "
               f"{workload.idle_since:%H:%M} UTC (now {util:.0f}%); it will be stopped in "
               f"{minutes_text(left)} ({stop_at:%H:%M} UTC) unless they are used")
    event_new(workload, EventType.POLICY, at=now, code=EventCode.IDLE_WARNING,
              message=message, payload={"stops_at": stop_at.isoformat(),
                                        "threshold_pct": limit.threshold_pct,
                                        "timeout_s": limit.timeout_s}).save()
    workload.idle_warned_at = now
    workload.save(update_fields=["idle_warned_at"])
    transaction.on_commit(lambda: notify(
        workload, f"Session {workload.name} is idle and will be stopped",
        f"{workload.name} in {workload.queue.path}: {message}.\n\nIts files on its volume are "
        "kept when it is stopped."))


def _stop(workload: Workload, limit: IdleLimit, util: Decimal, now: datetime) -> None:
    assert workload.idle_since is not None and limit.timeout_s is not None
    message = (f"stopped idle: its GPUs below {limit.threshold_pct}% for "
               f"{minutes_text(limit.timeout_s)} (since {workload.idle_since:%H:%M} UTC, now "
               f"{util:.0f}%)")
    session_stop(workload, now=now, code=EventCode.IDLE_STOPPED, reason=EndReason.IDLE,
                 message=message, payload={"idle_since": workload.idle_since.isoformat(),
                                           "timeout_s": limit.timeout_s,
                                           "threshold_pct": limit.threshold_pct},
                 subject=f"Session {workload.name} was stopped idle",
                 body=f"{workload.name} in {workload.queue.path} was {message}. Its quota is "
                 "released; its files on its volume are kept: resubmit it to carry on.")


def session_stop(workload: Workload, *, now: datetime, code: str, reason: str, message: str,
                 payload: dict[str, Any], subject: str, body: str) -> None:
    """Stop a session (idle, or at its time limit): cancelled with `code` and `message`, its
    admission closed with `reason`, its objects deleted through the outbox (its volume kept),
    its owner told after the commit. The caller holds the workload's lock."""
    event = workload_transition(workload, WorkloadState.CANCELLED, at=now,
                                event_type=EventType.CANCELLED, code=code, message=message,
                                payload=payload)
    workload.preempt_deadline = None
    workload.nomination = None
    workload.save(update_fields=["state", "state_changed_at", "finished_at",
                                 "preempt_deadline", "nomination"])
    event.save()
    admission = admission_close(workload=workload, at=now, reason=reason)
    if admission is not None:
        outbox.messages_write([outbox.message_delete(
            admission_id=admission.pk, cluster_id=admission.cluster_id, at=now)])
    transaction.on_commit(lambda: notify(workload, subject, body))


def sessions_cull(*, utilisation: Utilisation, now: datetime | None = None) -> CullReport:
    """One pass over the running sessions: record idling, warn, stop (see the module)."""
    now = now or timezone.now()
    report = CullReport()
    sessions = list(Workload.objects.filter(
        interactive=True, state=WorkloadState.RUNNING).select_related("queue", "owner"))
    cache: dict[tuple[int, str], IdleLimit] = {}
    limited = [(w, session_idle_limit(w, cache=cache)) for w in sessions]
    limited = [(w, limit) for w, limit in limited if limit.timeout_s is not None]
    report.sessions = len(limited)
    if limited:
        readings = utilisation([w for w, _ in limited])
        for workload, limit in limited:
            util = readings.get(workload.pk)
            if util is None:
                continue
            report.read += 1
            with transaction.atomic(), workload_writer():
                locked = Workload.objects.select_for_update().select_related(
                    "queue", "owner").get(pk=workload.pk)
                if locked.state != WorkloadState.RUNNING:
                    continue
                _step(locked, limit, util, now, report)
    if report.stopped:
        enqueue.cycle_nudge()
    return report


def _step(workload: Workload, limit: IdleLimit, util: Decimal, now: datetime,
          report: CullReport) -> None:
    assert limit.timeout_s is not None
    if util >= limit.threshold_pct:
        report.busy += 1
        if workload.idle_since is not None or workload.idle_warned_at is not None:
            workload.idle_since = workload.idle_warned_at = None
            workload.save(update_fields=["idle_since", "idle_warned_at"])
        return
    report.idle += 1
    if workload.idle_since is None:
        workload.idle_since = now
        workload.save(update_fields=["idle_since"])
    idle_s = (now - workload.idle_since).total_seconds()
    if idle_s >= limit.timeout_s:
        _stop(workload, limit, util, now)
        report.stopped.append(workload.pk)
        logger.info("session %s (%s) stopped idle", workload.pk, workload.name)
    elif idle_s >= limit.timeout_s - limit.warning_s and workload.idle_warned_at is None:
        _warn(workload, limit, util, now)
        report.warned.append(workload.pk)


def busiest(samples: Iterable[tuple[int, Decimal]]) -> dict[int, Decimal]:
    """Per workload, the largest of its (workload id, utilisation) readings."""
    out: dict[int, Decimal] = {}
    for workload_id, util in samples:
        out[workload_id] = max(util, out.get(workload_id, Decimal(0)))
    return out


def simulated_utilisation(sessions: list[Workload], now: datetime | None = None
                          ) -> dict[int, Decimal]:
    """The sessions' readings from their simulated clusters' DCGM exporters (at `now`: a
    simulated pod's utilisation is constant while it runs), for a portal with no Prometheus."""
    from scheduling.backends.naming import parse_pod_name
    from scheduling.backends.simulated.metrics import gpu_samples
    from scheduling.models import Admission, BackendKind, Cluster

    now = now or timezone.now()
    wanted = {w.pk for w in sessions}
    cluster_ids = set(Admission.objects.filter(
        workload_id__in=wanted, ended_at__isnull=True,
        cluster__backend=BackendKind.SIMULATED).values_list("cluster_id", flat=True))
    readings = []
    for cluster in Cluster.objects.filter(pk__in=cluster_ids):
        for sample in gpu_samples(cluster, now):
            parsed = parse_pod_name(sample.pod) if sample.pod else None
            if parsed is not None and parsed[0] in wanted:
                readings.append((parsed[0], Decimal(sample.util)))
    return busiest(readings)
