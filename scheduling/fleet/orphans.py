"""The orphan sweep: objects on a cluster that carry Allot's labels but whose workload is gone
or has ended, deleted after the cleanup TTL.

Maintenance deletes an ended admission's objects after the TTL (`workloads_maintain`); what
it cannot see is left behind: an object adopted from `kubectl apply` whose workload was
cancelled or rejected before it was ever admitted, a Job whose delete the cluster lost, the
objects of a workload since removed from the database. Every `ALLOT_ORPHAN_SWEEP_S` the sweep
lists each enabled cluster's Allot objects (`list_workloads`, by the `allot.io/workload-id`
label) and deletes those

- whose workload no longer exists, once the object is older than the TTL;
- whose workload has ended (finished, failed, cancelled, rejected) at least the TTL ago,
  unless an admission of it on that cluster still waits for maintenance's own cleanup.

An object whose workload is open (pending, reserved, running, preempting) is never touched,
wherever it was placed: an adopted object waiting for admission has no admission yet, and is
live. Each delete is a log line, an `ORPHAN_DELETED` event on the workload's timeline when it
still exists, and the counter `allot_orphan_objects_deleted_total{cluster}` of /metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from scheduling import tallies
from scheduling.backends import registry
from scheduling.backends.base import BackendError, WorkloadRef
from scheduling.fleet.refs import cleanup_ttl_s
from scheduling.models import (
    TERMINAL_STATES,
    Admission,
    Cluster,
    EventCode,
    EventType,
    Workload,
)
from scheduling.transitions import event_new

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep did: per cluster, the (namespace, workload id) swept; clusters that
    could not be listed."""

    deleted: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


def _why(ref: WorkloadRef, row: tuple[str, datetime | None, datetime] | None,
         uncleaned: set[int], ttl: timedelta, now: datetime) -> str | None:
    """Why `ref`'s objects are orphans (None: they are not, or not yet)."""
    if row is None:
        if ref.created_at is None or now - ref.created_at < ttl:
            return None  # maybe just created; an object of unknown age is left alone
        return "its workload no longer exists"
    state, finished_at, changed_at = row
    if state not in TERMINAL_STATES or ref.workload_id in uncleaned:
        return None  # live (adopted or not), or maintenance's to clean
    ended = finished_at or changed_at
    if now - ended < ttl:
        return None
    return f"its workload {state} at {ended:%Y-%m-%d %H:%M} UTC"


def orphans_sweep(*, now: datetime | None = None) -> SweepReport:
    """Delete the orphaned objects of every enabled cluster (see the module)."""
    now = now or timezone.now()
    ttl = timedelta(seconds=cleanup_ttl_s())
    report = SweepReport()
    for cluster in Cluster.objects.filter(enabled=True).order_by("name"):
        backend = registry.get_backend(cluster)
        try:
            refs = backend.list_workloads()
        except BackendError as exc:
            logger.warning("orphan sweep: cannot list cluster %s: %s", cluster.name, exc)
            report.failed.append(cluster.name)
            continue
        ids = {r.workload_id for r in refs}
        rows = {pk: (state, finished, changed) for pk, state, finished, changed in
                Workload.objects.filter(pk__in=ids).values_list(
                    "pk", "state", "finished_at", "state_changed_at")}
        uncleaned = set(Admission.objects.filter(
            cluster=cluster, workload_id__in=ids, cleaned_at__isnull=True,
            dispatched_at__isnull=False).values_list("workload_id", flat=True))
        for ref in refs:
            why = _why(ref, rows.get(ref.workload_id), uncleaned, ttl, now)
            if why is None:
                continue
            try:
                if not _delete(backend, cluster, ref, why, ref.workload_id in rows, now):
                    continue
            except BackendError as exc:
                logger.warning("orphan sweep: delete of workload %s's objects on %s failed: %s",
                               ref.workload_id, cluster.name, exc)
                continue
            report.deleted.setdefault(cluster.name, []).append(
                (ref.namespace, ref.workload_id))
    return report


def _delete(backend: object, cluster: Cluster, ref: WorkloadRef, why: str, exists: bool,
            now: datetime) -> bool:
    """Delete `ref`'s objects, with the event and the count; False when it turned out live."""
    names = ", ".join(ref.job_names) or ref.object_name
    with transaction.atomic():
        # Read again under its row lock: a workload still open (or back) is never swept.
        if exists and Workload.objects.select_for_update().filter(
                pk=ref.workload_id).exclude(state__in=TERMINAL_STATES).exists():
            return False
        backend.delete_workload(ref)  # type: ignore[attr-defined]
        message = (f"orphaned objects deleted from cluster {cluster.name} ({ref.namespace}/"
                   f"{names}): {why}")
        if exists:
            workload = Workload.objects.get(pk=ref.workload_id)
            event_new(workload, EventType.POLICY, at=now, code=EventCode.ORPHAN_DELETED,
                      message=message, payload={"cluster": cluster.name,
                                                "namespace": ref.namespace,
                                                "objects": [*ref.job_names]
                                                or [ref.object_name],
                                                "kind": ref.kind}).save()
        tallies.tallies_add([((tallies.ORPHANS, 0, cluster.name), 1.0)])
    logger.info("orphan sweep: workload %s: %s", ref.workload_id, message)
    return True
