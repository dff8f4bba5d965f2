"""Preemption and cleanup on the backend: suspending and deleting an admission's objects.

Deletions take the shard's lock, so an old interval's delete never lands after a new
interval's create of the same Job names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.backends import registry
from scheduling.backends.base import (
    ClusterEventType,
)
from scheduling.fleet.refs import (
    _admissions,
    workload_ref,
)
from scheduling.locks import (
    DISPATCH_SHARDS,
    cluster_lock,
)
from scheduling.models import (
    Admission,
    EventType,
    WorkloadEvent,
)


def admissions_suspend(*, admission_ids: list[int], reasons: dict[int, str] | None = None
                       ) -> None:
    """Suspend several preempted workloads (one pass per cluster, one transaction each) and
    post why beside each (`reasons` by admission id; else its latest preemption's message).

    An admission that has ended meanwhile is left alone: its delete follows, and its Jobs'
    names may belong to a newer interval by now.
    """
    by_cluster: dict[int, list[Admission]] = {}
    for adm in _admissions(pk__in=admission_ids, dispatched_at__isnull=False,
                           ended_at__isnull=True):
        by_cluster.setdefault(adm.cluster_id, []).append(adm)
    if not by_cluster:
        return
    messages = {}
    if reasons is None:
        for wid, message in (WorkloadEvent.objects.filter(
                workload_id__in=[a.workload_id for adms in by_cluster.values() for a in adms],
                type=EventType.PREEMPTED).order_by("at", "id").values_list("workload_id",
                                                                           "message")):
            messages[wid] = message  # the latest preemption's reason
    else:
        messages = {a.workload_id: reasons[a.pk] for adms in by_cluster.values() for a in adms
                    if reasons.get(a.pk)}
    for adms in by_cluster.values():
        backend = registry.get_backend(adms[0].cluster)
        with transaction.atomic():
            for adm in adms:
                ref = workload_ref(adm)
                backend.suspend_workload(ref, adm.workload.termination_grace_s)
                if adm.workload_id in messages:
                    backend.post_event(ref, ClusterEventType.WARNING, "Preempted",
                                       messages[adm.workload_id][:1000])


def admission_delete(*, admission_id: int, now: datetime | None = None) -> None:
    """Delete an ended admission's Jobs (idempotent) and note when."""
    admissions_delete(admission_ids=[admission_id], now=now)


def admissions_delete(*, admission_ids: list[int], now: datetime | None = None) -> None:
    """Delete ended admissions' Jobs, one pass per cluster under its lock; note when."""
    by_cluster: dict[int, list[Admission]] = {}
    for adm in _admissions(pk__in=admission_ids, cleaned_at__isnull=True):
        by_cluster.setdefault(adm.cluster_id, []).append(adm)
    for cluster_id, cluster_adms in by_cluster.items():
        backend = registry.get_backend(cluster_adms[0].cluster)
        for part in range(DISPATCH_SHARDS):
            adms = [a for a in cluster_adms if a.workload_id % DISPATCH_SHARDS == part]
            if adms:
                _delete_shard(backend, cluster_id, part, adms, now)


def _delete_shard(backend: Any, cluster_id: int, part: int, adms: list[Admission],
                  now: datetime | None) -> None:
    with cluster_lock(cluster_id, part, wait=True):
        newer = set(Admission.objects.filter(
            cluster_id=cluster_id, workload_id__in=[a.workload_id for a in adms],
            pk__gt=min(a.pk for a in adms)).values_list("workload_id", "pk"))
        with transaction.atomic():
            for adm in adms:
                # A newer interval on the same cluster owns the Job names now (its dispatch
                # removed the old objects first): deleting would kill the new run.
                if any(w == adm.workload_id and pk > adm.pk for w, pk in newer):
                    continue
                backend.delete_workload(workload_ref(adm))
        Admission.objects.filter(pk__in=[a.pk for a in adms]).update(
            cleaned_at=now or timezone.now())
