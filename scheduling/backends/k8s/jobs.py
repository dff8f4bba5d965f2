"""The Job of one pod set, built from a WorkloadSpec (no API call here).

Each pod set is a `batch/v1` Job created with `spec.suspend: true` (as Kueue does), gang-sized
(`parallelism = completions = count`), pinned to its flavor's nodes and to the nodes the engine
chose. Resources are written as Kubernetes quantities.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from core.quantity import format_base
from scheduling.backends.base import PodSetSpec, WorkloadSpec
from scheduling.backends.k8s.nodes import GPU_RESOURCE
from scheduling.backends.naming import job_labels

HOSTNAME_LABEL = "kubernetes.io/hostname"


def format_cpu(cores: Decimal) -> str:
    """Cores as a Kubernetes quantity: `4` or `1500m`."""
    cores = Decimal(cores)
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{int((cores * 1000).to_integral_value(ROUND_HALF_UP))}m"


def format_memory(gib: Decimal) -> str:
    """GiB as a Kubernetes quantity: `256Gi` or `1536Mi`."""
    gib = Decimal(gib)
    if gib == gib.to_integral_value():
        return f"{int(gib)}Gi"
    return f"{int((gib * 1024).to_integral_value(ROUND_HALF_UP))}Mi"


def job_body(spec: WorkloadSpec, pod_set: PodSetSpec, *, default_image: str) -> dict[str, Any]:
    """The Job of one pod set: suspended, gang-sized, pinned to the flavor (and nodes).

    `default_image` is the container's image when the workload names none.
    """
    name = spec.ref.job_names[spec.pod_sets.index(pod_set)]
    labels = {
        **{str(k): str(v) for k, v in spec.labels.items()},
        **job_labels(
            workload_id=spec.workload_id, queue_path=spec.queue_path,
            pod_set_index=pod_set.index, flavor=pod_set.flavor,
        ),
    }
    annotations = {"allot.io/workload-name": spec.name, **spec.annotations}
    requests: dict[str, str] = {}
    if pod_set.cpu:
        requests["cpu"] = format_cpu(pod_set.cpu)
    if pod_set.memory_gib:
        requests["memory"] = format_memory(pod_set.memory_gib)
    limits: dict[str, str] = {}
    if pod_set.gpus:
        limits[GPU_RESOURCE] = str(int(pod_set.gpus))
    for res, base in sorted(pod_set.resources.items()):
        # Extended resources are not overcommitted: the limit is also the request.
        limits[res] = format_base(res, base)
    container: dict[str, Any] = {
        "name": "main",
        "image": spec.image or default_image,
        "resources": {"requests": requests, "limits": limits},
    }
    if spec.command:
        container["command"] = list(spec.command)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(spec.termination_grace_s),
        "nodeSelector": dict(pod_set.node_selector),
        "containers": [container],
    }
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    if pod_set.gpus:
        pod_spec["tolerations"] = [
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
        ]
    if pod_set.nodes:
        # The engine chose these nodes; keep the scheduler to them (gang, topology).
        pod_spec["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{
                    "key": HOSTNAME_LABEL, "operator": "In",
                    "values": sorted(set(pod_set.nodes)),
                }],
            }]},
        }}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": spec.namespace,
            "labels": labels, "annotations": annotations,
        },
        "spec": {
            "suspend": True,
            "parallelism": int(pod_set.count),
            "completions": int(pod_set.count),
            # Allot requeues a failed gang itself; Kubernetes must not restart pods of it.
            "backoffLimit": 0,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }
