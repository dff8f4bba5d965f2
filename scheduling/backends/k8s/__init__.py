"""The Kubernetes backend: the official client, one API client per cluster.

Each pod set is a `batch/v1` Job created with `spec.suspend: true` (as Kueue does), unsuspended
on start and suspended again on preemption. Reasons become `events.k8s.io/v1` Events regarding
the Job, so `kubectl describe job` shows them. Requests carry short timeouts and no automatic
retries: the Celery task that called us decides when to retry.

    client            the API client of a cluster (its connection), timeouts, error answers
    nodes             the node inventory; the check of a dispatch's assigned nodes
    namespaces        ensure_namespace
    priority_classes  sync_priority_classes; the check of a Job's PriorityClass
    jobs              the Job of a pod set, built from a WorkloadSpec
    dispatch          create, start, suspend and delete a workload's Jobs
    status            workload statuses, list_workloads
    watch             watch_workloads
    events            post_event
    backend           KubernetesBackend, made of the above
"""

from scheduling.backends.k8s.backend import KubernetesBackend

__all__ = ["KubernetesBackend"]
