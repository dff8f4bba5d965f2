"""Cluster backends behind one protocol (see base.py); only this package imports `kubernetes`."""

from scheduling.backends.base import (
    BackendError,
    ClusterBackend,
    DispatchRefused,
    EventType,
    FlavorMatch,
    NodeInfo,
    Phase,
    PodSetSpec,
    PodSetStatus,
    PriorityClassSpec,
    RefusalReason,
    WatchResult,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
    clear_backend_cache,
    get_backend,
)
from scheduling.backends.flavors import priority_classes_from_db
from scheduling.backends.naming import job_labels, job_name, pod_name, queue_label

__all__ = [
    "BackendError",
    "ClusterBackend",
    "DispatchRefused",
    "EventType",
    "FlavorMatch",
    "NodeInfo",
    "Phase",
    "PodSetSpec",
    "PodSetStatus",
    "PriorityClassSpec",
    "RefusalReason",
    "WorkloadRef",
    "WorkloadSpec",
    "WorkloadStatus",
    "WatchResult",
    "clear_backend_cache",
    "get_backend",
    "job_labels",
    "job_name",
    "pod_name",
    "priority_classes_from_db",
    "queue_label",
]
