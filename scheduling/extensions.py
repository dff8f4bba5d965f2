"""Hooks through which other apps (policies, billing) take part in submission and the cycle.

Apps register their functions in their `AppConfig.ready()`, so the scheduling code never
imports them:

- `register_submission_check(fn)`: `fn(ctx: SubmissionContext) -> SubmissionVerdict | None`,
  called by `workload_submit` inside its transaction, before anything is saved. A verdict may
  deny (one `(code, message)` per broken rule: the workload is recorded `rejected` with those
  reasons), override the priority class, and add audit lines (recorded as `policy` events).
  Inside `submission_update(replaces=..., previous=...)` (scheduling.request.updates: a
  restart or an update of an existing workload), checks see `is_update` true, the id of the
  workload it replaces and its previous request, so rules can grandfather what does not grow.
- `register_cost_estimator(fn)`: `fn(flavor: str, pods: list[dict], now) -> CostEstimate |
  None`, what the request form shows a request would cost per hour on its flavor (billing).
- `register_whatif_policies(fn)`: `fn(changes, workloads, limit_keys) -> dict`, what a
  what-if's policy changes do to its scenario (policies/whatif.py; raises a ValueError with
  `problems` on a bad change).
- `register_cycle_adjuster(fn)`: `fn(ctx: CycleContext) -> None`, called while the scheduling
  cycle builds the engine snapshot. It may lower a queue key's max (naming the policy, so a
  `QUOTA_MAX` reason names it) and restrict the clusters a pending workload may use.
- `register_session_rules(fn)`: `fn(queue_path: str, username: str) -> list[SessionRule]`,
  the admin policies that set interactive sessions' limits (idle timeout and threshold, the
  longest time limit) for that queue and user (policies/sessions.py); scheduling/sessions.py
  picks the most specific.
- `register_session_extension_check(fn)`: `fn(workload, extra_s: int, now) -> list[(code,
  message)]`, the reasons a session's time limit may not grow by `extra_s` seconds now
  (billing: a budget blocking new work); an empty list allows it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SubmissionContext:
    """What a submission check sees: who submits what, where (`request` is the input dict).

    For an update or restart (`is_update`): `replaces`, the id of the existing workload, and
    `previous`, its request in the submission input shape (queue, priority_class, pods...).
    """

    user: Any
    queue: Any
    team: Any
    request: Mapping[str, Any]
    is_update: bool = False
    replaces: int | None = None
    previous: Mapping[str, Any] | None = None


_update: ContextVar[tuple[int, Mapping[str, Any]] | None] = ContextVar(
    "allot_submission_update", default=None)


@contextmanager
def submission_update(*, replaces: int, previous: Mapping[str, Any]) -> Iterator[None]:
    """Submissions made inside update or restart workload `replaces` (whose request was
    `previous`): the checks see `is_update`, `replaces` and `previous`."""
    token = _update.set((replaces, previous))
    try:
        yield
    finally:
        _update.reset(token)


@dataclass
class SubmissionVerdict:
    """A check's answer: reasons to deny, a priority class to impose, audit lines to record."""

    deny: list[tuple[str, str]] = field(default_factory=list)
    priority_class: str | None = None
    audit: list[str] = field(default_factory=list)
    priority_policy: str = ""  # the policy that imposed `priority_class`, for the timeline


SubmissionCheck = Callable[[SubmissionContext], "SubmissionVerdict | None"]


@dataclass(frozen=True)
class PendingInfo:
    """A pending workload as adjusters see it (ids and plain values, no ORM objects)."""

    id: int
    name: str
    queue_path: str
    team: str | None
    owner: str
    priority_class: str
    labels: Mapping[str, Any]
    dataset: str
    gpus: int
    flavors: Sequence[str]


@dataclass
class CycleContext:
    """The per-cycle view an adjuster reads and narrows.

    `quota_max` maps (queue path, "flavor/resource") to the max the engine will use (None =
    unlimited); call `lower_max` to lower it. `allowed_clusters` maps a workload id to the
    cluster names it may use (absent = all); call `restrict_clusters` to narrow it.
    `record` False: a forecast, not a cycle (adjusters write nothing).
    """

    now: datetime
    queue_paths: Sequence[str]
    clusters: Sequence[str]
    pending: Sequence[PendingInfo]
    quota_max: dict[tuple[str, str], Any] = field(default_factory=dict)
    max_policy: dict[tuple[str, str], str] = field(default_factory=dict)
    allowed_clusters: dict[int, set[str]] = field(default_factory=dict)
    cluster_reasons: dict[int, str] = field(default_factory=dict)
    # False: not a cycle but a forecast or a what-if reading its view (adjusters narrow the
    # same way, and record nothing: the cycle records).
    record: bool = True

    def lower_max(self, queue_path: str, key: str, value: Any, *, policy: str) -> None:
        """Lower (never raise) a queue key's max for this cycle, naming the policy."""
        current = self.quota_max.get((queue_path, key))
        if current is None or value < current:
            self.quota_max[(queue_path, key)] = value
            self.max_policy[(queue_path, key)] = policy

    def restrict_clusters(
        self, workload_id: int, clusters: Sequence[str] | set[str], *, reason: str = ""
    ) -> None:
        """Intersect the clusters a workload may use with `clusters` (with a reason to show)."""
        allowed = set(clusters)
        if workload_id in self.allowed_clusters:
            allowed &= self.allowed_clusters[workload_id]
        self.allowed_clusters[workload_id] = allowed
        if reason:
            self.cluster_reasons[workload_id] = reason


CycleAdjuster = Callable[[CycleContext], None]

_submission_checks: list[SubmissionCheck] = []
_cycle_adjusters: list[CycleAdjuster] = []


def register_submission_check(fn: SubmissionCheck) -> SubmissionCheck:
    """Add a check run on every submission (idempotent: registering twice keeps one)."""
    if fn not in _submission_checks:
        _submission_checks.append(fn)
    return fn


def register_cycle_adjuster(fn: CycleAdjuster) -> CycleAdjuster:
    """Add an adjuster run while each cycle builds its snapshot (idempotent)."""
    if fn not in _cycle_adjusters:
        _cycle_adjusters.append(fn)
    return fn


WhatIfPolicies = Callable[..., dict[str, Any]]
_whatif_policies: list[WhatIfPolicies] = []


def register_whatif_policies(fn: WhatIfPolicies) -> WhatIfPolicies:
    """Set the function that turns a what-if's policy changes into scenario edits."""
    _whatif_policies[:] = [fn]
    return fn


def whatif_policies() -> WhatIfPolicies | None:
    """The registered function (None: no policies app: policy changes cannot be tried)."""
    return _whatif_policies[0] if _whatif_policies else None


def unregister_submission_check(fn: SubmissionCheck) -> None:
    """Remove a check (tests)."""
    if fn in _submission_checks:
        _submission_checks.remove(fn)


def unregister_cycle_adjuster(fn: CycleAdjuster) -> None:
    """Remove an adjuster (tests)."""
    if fn in _cycle_adjusters:
        _cycle_adjusters.remove(fn)


def run_submission_checks(ctx: SubmissionContext) -> SubmissionVerdict:
    """Merge every registered check's verdict: all denials, the last priority class, all audit."""
    merged = SubmissionVerdict()
    update = _update.get()
    if update is not None and not ctx.is_update:
        ctx = replace(ctx, is_update=True, replaces=update[0], previous=update[1])
    for fn in list(_submission_checks):
        verdict = fn(ctx)
        if verdict is None:
            continue
        merged.deny.extend(verdict.deny)
        merged.audit.extend(verdict.audit)
        if verdict.priority_class:
            merged.priority_class = verdict.priority_class
            merged.priority_policy = verdict.priority_policy
    return merged


@dataclass(frozen=True)
class CostEstimate:
    """What a request would cost per hour on a flavor, at the rates in force, and the cards it
    is billed as (fractions as they are, MIG slices as their GPU-equivalents)."""

    per_hour: Decimal
    currency: str
    cards: Decimal


CostEstimator = Callable[[str, list[dict[str, Any]], datetime], "CostEstimate | None"]
_cost_estimators: list[CostEstimator] = []


def register_cost_estimator(fn: CostEstimator) -> CostEstimator:
    """Add the request form's cost estimate (idempotent)."""
    if fn not in _cost_estimators:
        _cost_estimators.append(fn)
    return fn


def estimate_cost(flavor: str, pods: list[dict[str, Any]], now: datetime
                  ) -> CostEstimate | None:
    """The first registered estimator's answer (None: no estimator, or no rate)."""
    for fn in list(_cost_estimators):
        estimate = fn(flavor, pods, now)
        if estimate is not None:
            return estimate
    return None


def run_cycle_adjusters(ctx: CycleContext) -> None:
    """Let each adjuster narrow the cycle.

    A failing adjuster fails the cycle (logged; the next beat retries): skipping it could admit
    work a placement or compliance policy forbids, and nothing is written by a failed cycle.
    """
    for fn in list(_cycle_adjusters):
        try:
            fn(ctx)
        except Exception:
            logger.exception("cycle adjuster %r failed; this cycle is abandoned", fn)
            raise


# --- workload events, after they are committed --------------------------------------------------

@dataclass(frozen=True)
class EventNote:
    """A workload event as listeners see it, after its transaction committed."""

    workload_id: int
    type: str
    code: str
    message: str
    actor_id: int | None


EventListener = Callable[[list[EventNote]], None]
_event_listeners: list[EventListener] = []


def register_event_listener(fn: EventListener) -> EventListener:
    """Add a listener told of every batch of workload events written by the state changes
    that people are told of (the cycle, sync, maintenance, approval decisions) (idempotent)."""
    if fn not in _event_listeners:
        _event_listeners.append(fn)
    return fn


def events_written(events: Sequence[Any]) -> None:
    """Tell the listeners of `events` (WorkloadEvent rows being written in the current
    transaction) once it commits; a listener's failure is logged, never raised: the state
    change stands whatever its notifications do."""
    if not events or not _event_listeners:
        return
    from django.db import transaction

    notes = [EventNote(int(e.workload_id), str(e.type), str(e.code or ""), e.message or "",
                       e.actor_id) for e in events if e.workload_id is not None]

    def tell() -> None:
        for fn in list(_event_listeners):
            try:
                fn(notes)
            except Exception:
                logger.exception("event listener %r failed", fn)

    transaction.on_commit(tell)


@dataclass(frozen=True)
class SessionRule:
    """An admin policy's settings for interactive sessions, and how specific it is: whether it
    names the user, and the depth of the queue path it names (0: every queue)."""

    source: str  # how the session page names it: "policy night-owls"
    user_specific: bool
    depth: int
    idle_timeout_s: int | None = None
    idle_gpu_util_pct: int | None = None
    max_time_s: int | None = None


SessionRules = Callable[[str, str], Sequence[SessionRule]]
SessionExtensionCheck = Callable[[Any, int, datetime], list[tuple[str, str]]]
_session_rules: list[SessionRules] = []
_session_extension_checks: list[SessionExtensionCheck] = []


def register_session_rules(fn: SessionRules) -> SessionRules:
    """Add a source of session rules (idempotent)."""
    if fn not in _session_rules:
        _session_rules.append(fn)
    return fn


def session_rules(queue_path: str, username: str) -> list[SessionRule]:
    """Every registered source's rules for a session of `username` in `queue_path`."""
    return [rule for fn in list(_session_rules) for rule in fn(queue_path, username)]


def register_session_extension_check(fn: SessionExtensionCheck) -> SessionExtensionCheck:
    """Add a check run before a session's time limit is extended (idempotent)."""
    if fn not in _session_extension_checks:
        _session_extension_checks.append(fn)
    return fn


def run_session_extension_checks(workload: Any, extra_s: int, now: datetime
                                 ) -> list[tuple[str, str]]:
    """Every registered check's refusals of extending `workload` by `extra_s` seconds."""
    return [r for fn in list(_session_extension_checks) for r in fn(workload, extra_s, now)]
