"""What the fleet stages share: an admission's backend reference and the workers' knobs."""

from __future__ import annotations

from django.conf import settings

from scheduling.backends.base import (
    WorkloadRef,
)
from scheduling.backends.naming import LABEL_OBJECT, adopted_group
from scheduling.models import (
    Admission,
    Workload,
)


def _setting(name: str) -> float:
    return float(settings.ALLOT_WORKERS[name])


def penalty_s() -> float:
    """How long a refused dispatch lowers the cluster's health."""
    return _setting("dispatch_penalty_s")


def penalty() -> float:
    """How much a refused dispatch lowers the cluster's health (below the 0.5 threshold)."""
    return _setting("dispatch_penalty")


def cleanup_ttl_s() -> float:
    """How long finished workloads' cluster objects are kept (for logs and inspection)."""
    return _setting("cleanup_ttl_s")


def namespace_of(workload: Workload) -> str:
    """The leaf queue's namespace (its path made DNS-safe when none is set)."""
    return workload.queue.namespace or workload.queue.path.replace("/", "-")


def workload_ref(admission: Admission) -> WorkloadRef:
    """The backend reference of an admission's workload (from database facts)."""
    w = admission.workload
    return WorkloadRef.for_workload(
        namespace=namespace_of(w), workload_id=w.pk,
        pod_set_indexes=[ps.index for ps in w.pod_sets.all()], kind=w.kind,
        object_name=(w.labels or {}).get(LABEL_OBJECT, ""), group=adopted_group(w.labels))


def _admissions(**filters: object) -> list[Admission]:
    return list(
        Admission.objects.filter(**filters)
        .select_related("workload__queue", "workload__priority_class", "flavor", "cluster")
        .prefetch_related("workload__pod_sets")
        .order_by("pk")
    )
