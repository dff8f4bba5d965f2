"""Delivery of the outbox (scheduling/outbox.py): cluster calls sent until the cluster
confirms them.

A pass claims the due rows (locked with SKIP LOCKED, so several workers take different rows,
and leased: a claimed row is not due again for `outbox_lease_s`), commits the claim, then
sends them outside any transaction, grouped per kind and cluster. A call that returns without
error is confirmed (a delete has set its admission's `cleaned_at`); one that fails is due
again after a capped exponential backoff, with its error kept. Every call is idempotent, so a
row sent twice (a lease that ran out, a crash after the call) does no harm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core import db
from scheduling import enqueue
from scheduling.backends import WorkloadRef, registry
from scheduling.backends.naming import LABEL_OBJECT
from scheduling.fleet.dispatch import cluster_dispatch
from scheduling.fleet.teardown import admissions_delete, admissions_suspend
from scheduling.models import (
    Admission,
    Cluster,
    EventCode,
    EventType,
    OutboxKind,
    OutboxMessage,
    Workload,
    WorkloadEvent,
)
from scheduling.request.validation import gpus_shown

logger = logging.getLogger(__name__)


@dataclass
class DeliveryReport:
    """What one delivery pass sent: row ids confirmed, and row ids to retry later."""

    delivered: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    deleted: bool = False  # a delete was confirmed (capacity came back)


class NotDone(Exception):
    """The cluster call returned but did not do everything asked (a dispatch pass that met
    errors or found its shards busy): retried like an error."""


def _conf(name: str) -> float:
    return float(settings.ALLOT_WORKERS[name])


def backoff_s(attempts: int) -> float:
    """Seconds before the next try of a row that failed `attempts` times: base * 2^(n-1),
    at most `outbox_backoff_max_s`."""
    base, cap = _conf("outbox_backoff_base_s"), _conf("outbox_backoff_max_s")
    return float(min(cap, base * 2 ** min(max(0, attempts - 1), 30)))


def outbox_deliver(*, now: datetime | None = None, batch: int = 200,
                   batches: int = 5) -> DeliveryReport:
    """Send the due rows of the outbox, `batch` at a time, at most `batches` times; confirmed
    ones are marked delivered, failed ones retried later. A confirmed delete nudges a cycle:
    the capacity its admission held is free now."""
    now = now or timezone.now()
    report = DeliveryReport()
    for _ in range(batches):
        rows = _claim(now, batch)
        _deliver(rows, now, report)
        if len(rows) < batch:
            break
    if report.delivered or report.failed:
        logger.info("outbox: %d delivered, %d to retry", len(report.delivered),
                    len(report.failed))
    if report.deleted:
        transaction.on_commit(enqueue.cycle_nudge)
    return report


def _deliver(rows: list[OutboxMessage], now: datetime, report: DeliveryReport) -> None:
    """Send claimed rows, one call per kind and cluster; the outcome is the whole group's."""
    groups: dict[tuple[str, int], list[OutboxMessage]] = {}
    for row in rows:
        groups.setdefault((row.kind, row.cluster_id), []).append(row)
    for (kind, cluster_id), messages in groups.items():
        try:
            _SEND[kind](cluster_id, messages, now)
        except Exception as exc:
            _failed(messages, exc, now)
            report.failed += [m.pk for m in messages]
            continue
        OutboxMessage.objects.filter(pk__in=[m.pk for m in messages]).update(delivered_at=now)
        report.delivered += [m.pk for m in messages]
        report.deleted = report.deleted or kind == OutboxKind.DELETE


def outbox_prune(*, now: datetime | None = None) -> int:
    """Forget rows delivered more than `outbox_keep_s` ago; returns how many."""
    now = now or timezone.now()
    before = now - timedelta(seconds=_conf("outbox_keep_s"))
    return OutboxMessage.objects.filter(delivered_at__lt=before).delete()[0]


def _claim(now: datetime, limit: int) -> list[OutboxMessage]:
    """The due rows, taken by this pass: one more attempt each, not due again before the
    lease ends (the outcome of the call sets the real next time)."""
    lease_until = now + timedelta(seconds=_conf("outbox_lease_s"))
    with transaction.atomic():
        rows = list(db.skip_locked(OutboxMessage.objects.filter(
            delivered_at__isnull=True, next_attempt_at__lte=now)
            .order_by("next_attempt_at", "id"))[:limit])
        if rows:
            OutboxMessage.objects.filter(pk__in=[r.pk for r in rows]).update(
                attempts=F("attempts") + 1, next_attempt_at=lease_until)
    for row in rows:
        row.attempts += 1
    return rows


def _send_delete(cluster_id: int, messages: list[OutboxMessage], now: datetime) -> None:
    admissions_delete(admission_ids=[m.admission_id for m in messages if m.admission_id],
                      now=now)


def _send_suspend(cluster_id: int, messages: list[OutboxMessage], now: datetime) -> None:
    admissions_suspend(
        admission_ids=[m.admission_id for m in messages if m.admission_id],
        reasons={m.admission_id: str(m.payload.get("reason", ""))
                 for m in messages if m.admission_id})


def _send_dispatch(cluster_id: int, messages: list[OutboxMessage], now: datetime) -> None:
    # One pass covers every row of the cluster: it dispatches all its reserved work.
    result = cluster_dispatch(cluster_id=cluster_id, wait_s=2.0)
    if result.skipped or result.errors:
        raise NotDone("; ".join(result.errors[:5]) or "another dispatch pass held the cluster")


def _send_event(cluster_id: int, messages: list[OutboxMessage], now: datetime) -> None:
    # Reasons on the objects of adopted workloads (kubectl describe); an object gone since
    # has nothing to describe: the post is a no-op.
    cluster = Cluster.objects.get(pk=cluster_id)
    backend = registry.get_backend(cluster)
    ids = [int(m.payload.get("workload_id", 0)) for m in messages]
    workloads = {w.pk: w for w in Workload.objects.filter(pk__in=ids).select_related("queue")}
    for m in messages:
        w = workloads.get(int(m.payload.get("workload_id", 0)))
        if w is None or not w.kind:
            continue
        ref = WorkloadRef.for_workload(
            namespace=w.queue.namespace or w.queue.path.replace("/", "-"), workload_id=w.pk,
            pod_set_indexes=[0], kind=w.kind,
            object_name=(w.labels or {}).get(LABEL_OBJECT, ""))
        backend.post_event(ref, str(m.payload.get("type") or "Normal"),
                           str(m.payload.get("reason") or "Pending"),
                           str(m.payload.get("message") or ""))


_SEND: dict[str, Callable[[int, list[OutboxMessage], datetime], None]] = {
    OutboxKind.DELETE: _send_delete,
    OutboxKind.SUSPEND: _send_suspend,
    OutboxKind.DISPATCH: _send_dispatch,
    OutboxKind.EVENT: _send_event,
}


def _failed(messages: list[OutboxMessage], exc: Exception, now: datetime) -> None:
    """Retry later, with the error kept; from the alarm threshold on, say so loudly."""
    error = f"{type(exc).__name__}: {exc}"[:2000]
    for m in messages:
        m.next_attempt_at = now + timedelta(seconds=backoff_s(m.attempts))
        m.last_error = error
    db.bulk_set(OutboxMessage, messages, ["next_attempt_at", "last_error"])
    alarm = int(settings.ALLOT_WORKERS["outbox_alarm_attempts"])
    loud = [m for m in messages if m.attempts >= alarm]
    for m in messages:
        if m not in loud:
            logger.warning("outbox %s (%s) attempt %d failed, next at %s: %s", m.pk, m,
                           m.attempts, m.next_attempt_at.isoformat(), error)
    for m in loud:
        logger.error("outbox %s (%s) not confirmed after %d attempts, next at %s: %s", m.pk,
                     m, m.attempts, m.next_attempt_at.isoformat(), error)
    _alarm_events([m for m in loud if m.attempts == alarm and m.admission_id], error, now)


def _alarm_events(messages: list[OutboxMessage], error: str, now: datetime) -> None:
    """One event on each workload whose delete or suspend reached the alarm threshold: its
    timeline says why its capacity still counts as used."""
    if not messages:
        return
    admissions = {a.pk: a for a in Admission.objects.filter(
        pk__in=[m.admission_id for m in messages]).select_related("cluster")}
    events = []
    for m in messages:
        adm = admissions.get(m.admission_id or 0)
        if adm is None:
            continue
        if m.kind == OutboxKind.DELETE:
            code = EventCode.DELETE_UNCONFIRMED
            what = (f"the delete of its objects; its {gpus_shown(adm.gpus)} GPUs on "
                    f"{', '.join(sorted(set(adm.nodes)))} still count as used")
        else:
            code = EventCode.SUSPEND_UNCONFIRMED
            what = "the suspension of its objects (preempted)"
        events.append(WorkloadEvent(
            workload_id=adm.workload_id, at=now, type=EventType.UNCONFIRMED, code=code,
            message=f"cluster {adm.cluster.name} has not confirmed {what} after "
            f"{m.attempts} attempts (next try in {backoff_s(m.attempts):.0f}s): {error}",
            payload={"outbox": m.pk, "attempts": m.attempts}))
    WorkloadEvent.objects.bulk_create(events)
