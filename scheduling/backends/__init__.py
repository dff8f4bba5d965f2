"""Cluster backends behind one protocol (see base.py); only this package imports `kubernetes`."""

from scheduling.backends.base import (
    BackendError,
    BatchDispatch,
    ClusterBackend,
    ClusterEventType,
    DispatchOutcome,
    DispatchRefused,
    FlavorMatch,
    NodeInfo,
    PodSetSpec,
    PodSetStatus,
    PriorityClassSpec,
    RefusalReason,
    RunPhase,
    WatchResult,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
)
from scheduling.backends.flavors import priority_classes_from_db
from scheduling.backends.naming import job_labels, job_name, pod_name, queue_label
from scheduling.backends.registry import clear_backend_cache, get_backend

__all__ = [
    "BackendError",
    "BatchDispatch",
    "ClusterBackend",
    "DispatchOutcome",
    "DispatchRefused",
    "ClusterEventType",
    "FlavorMatch",
    "NodeInfo",
    "RunPhase",
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
