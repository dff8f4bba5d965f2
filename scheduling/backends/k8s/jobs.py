"""The Job of one pod set, built from a WorkloadSpec (no API call here).

Each pod set is a `batch/v1` Job created with `spec.suspend: true` (as Kueue does), gang-sized
(`parallelism = completions = count`), pinned to its flavor's nodes and to the nodes the engine
chose. Resources are written as Kubernetes quantities.

A fraction of a card (QUOTA-SEMANTICS §10) is written for the cluster's GPU sharing mechanism,
declared in its connection (`"gpu_sharing"`):
- `hami` (Project-HAMi): `nvidia.com/gpu: 1` with `nvidia.com/gpucores` (percent of the card's
  compute, rounded up) and `nvidia.com/gpumem` (the memory slice in MiB; without a known slice,
  `nvidia.com/gpumem-percentage`); when every pod of the set is on one card whose UUID the node
  registers (HAMi's `hami.io/node-nvidia-register` annotation), `nvidia.com/use-gpuuuid` pins
  the pods to that card; a pod set spread over several registered cards is pinned to that list
  of cards on its template, and each pod to its own card by Allot's admission webhook for pods
  (`allot.io/gpu-cards`: the card of each pod index, in order; the template carries the label
  `allot.io/pin-cards` that selects its pods for the webhook; see `pod_card_pin`);
- `kai` (NVIDIA KAI Scheduler): the pod annotation `gpu-fraction` (or `gpu-memory` in MiB when
  the pod asked an explicit memory slice), no `nvidia.com/gpu` limit; every pod of such a
  cluster names `schedulerName: kai-scheduler` and carries the label `kai.scheduler/queue`
  (the connection's `kai_queue`, default `default-queue`) on the Job and its pods;
- `time-slicing` (NVIDIA device plugin replicas): `nvidia.com/gpu: 1`, one replica of a shared
  card (no memory isolation);
- none: the fraction asks a whole card (`nvidia.com/gpu: 1`), so it still runs.
`sharing_fields` is what a pod set's template needs; manifest kinds get the same on each of
their pod templates (objects.py, `Placement`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from core.quantity import format_base
from scheduling.backends.base import PodSetSpec, WorkloadSpec
from scheduling.backends.k8s.nodes import GPU_RESOURCE
from scheduling.backends.naming import (
    CARDS_ANNOTATION,
    HAMI_USE_UUID,
    KAI_QUEUE_LABEL,
    KAI_SCHEDULER,
    PIN_LABEL,
    job_labels,
)
from scheduling.kinds.sharing import (
    HAMI_CORES,
    HAMI_MEMORY,
    HAMI_MEMORY_PERCENT,
    KAI_FRACTION,
    KAI_MEMORY,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
SHARING = ("", "hami", "kai", "time-slicing")


@dataclass(frozen=True)
class SharingFields:
    """What a cluster's GPU sharing mechanism needs on one pod set's pod template: labels and
    annotations to add, the GPU container's limits for a fraction (None: leave the GPU limits
    as they are; a mapping replaces `nvidia.com/gpu` with it) and the scheduler's name."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    gpu_limits: dict[str, str] | None = None
    scheduler_name: str = ""


def sharing_fields(pod_set: PodSetSpec, sharing: str,
                   card_uuids: Mapping[str, Sequence[str]] | None = None,
                   kai_queue: str = "default-queue") -> SharingFields:
    """The fields of `sharing` for one pod set (the same for a Job's template and for each pod
    template of a manifest kind)."""
    out = SharingFields()
    if sharing == "kai":
        out = SharingFields(labels={KAI_QUEUE_LABEL: kai_queue}, scheduler_name=KAI_SCHEDULER)
    if is_fraction(pod_set.gpus):
        limits, annotations = shared_gpu(pod_set, sharing, card_uuids)
        out.annotations.update(annotations)
        if sharing == "hami":
            per_pod = hami_pod_uuids(pod_set, card_uuids)
            if len(set(per_pod)) > 1:
                out.annotations[CARDS_ANNOTATION] = ",".join(per_pod)
                out.labels[PIN_LABEL] = "true"
        return SharingFields(labels=out.labels, annotations=out.annotations, gpu_limits=limits,
                             scheduler_name=out.scheduler_name)
    return out


def is_fraction(gpus: Decimal) -> bool:
    return Decimal(0) < Decimal(gpus) < 1


def fraction_text(gpus: Decimal) -> str:
    """A fraction as written in an annotation: `0.25`."""
    return format(Decimal(gpus).normalize(), "f")


def slice_mib(pod_set: PodSetSpec) -> int | None:
    """The memory slice of a fractional pod in MiB (None when neither it nor the card's memory
    is known)."""
    if pod_set.gpu_memory_gib is not None:
        gib = Decimal(pod_set.gpu_memory_gib)
    elif pod_set.card_memory_gib is not None:
        gib = Decimal(pod_set.gpus) * Decimal(pod_set.card_memory_gib)
    else:
        return None
    return int((gib * 1024).to_integral_value(ROUND_HALF_UP))


def shared_gpu(pod_set: PodSetSpec, sharing: str,
               card_uuids: Mapping[str, Sequence[str]] | None = None
               ) -> tuple[dict[str, str], dict[str, str]]:
    """The container limits and pod annotations that give each pod its fraction of a card."""
    f = Decimal(pod_set.gpus)
    percent = str(max(1, math.ceil(f * 100)))
    mib = slice_mib(pod_set)
    if sharing == "kai":
        if pod_set.gpu_memory_gib is not None and mib is not None:
            return {}, {KAI_MEMORY: str(mib)}
        return {}, {KAI_FRACTION: fraction_text(f)}
    if sharing == "hami":
        limits = {GPU_RESOURCE: "1", HAMI_CORES: percent}
        if mib is not None:
            limits[HAMI_MEMORY] = str(mib)
        else:
            limits[HAMI_MEMORY_PERCENT] = percent
        annotations: dict[str, str] = {}
        pinned = hami_pinned_uuids(pod_set, card_uuids)
        if pinned:
            annotations[HAMI_USE_UUID] = ",".join(pinned)
        return limits, annotations
    return {GPU_RESOURCE: "1"}, {}


def hami_pinned_uuids(pod_set: PodSetSpec,
                      card_uuids: Mapping[str, Sequence[str]] | None) -> list[str]:
    """The UUIDs of the cards the engine chose for the pod set's fractions, in node and card
    order; empty (no pinning) unless every one is registered. The pods of a Job share one
    template, so a pod set spread over several cards is pinned to that set of cards (HAMi's
    annotation takes a comma-separated list): each pod lands on one of them, as its share
    allows, and on no other card."""
    if not card_uuids:
        return []
    out: list[str] = []
    for node, card in sorted(set(zip(pod_set.nodes, pod_set.cards, strict=False)),
                             key=lambda p: (p[0], -1 if p[1] is None else p[1])):
        uuids = card_uuids.get(node) or ()
        if card is None or not 0 <= card < len(uuids):
            return []
        out.append(uuids[card])
    return out


def hami_pod_uuids(pod_set: PodSetSpec,
                   card_uuids: Mapping[str, Sequence[str]] | None) -> list[str]:
    """The UUID of the card the engine chose for each pod of the set, in pod order (pod `i` on
    `nodes[i]`, card `cards[i]`); empty unless every one is registered."""
    if not card_uuids or len(pod_set.cards) < pod_set.count:
        return []
    out = []
    for node, card in zip(pod_set.nodes, pod_set.cards, strict=False):
        uuids = card_uuids.get(node) or ()
        if card is None or not 0 <= card < len(uuids):
            return []
        out.append(uuids[card])
    return out if len(out) == pod_set.count else []


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


def job_body(spec: WorkloadSpec, pod_set: PodSetSpec, *, default_image: str,
             sharing: str = "",
             card_uuids: Mapping[str, Sequence[str]] | None = None,
             kai_queue: str = "default-queue") -> dict[str, Any]:
    """The Job of one pod set: suspended, gang-sized, pinned to the flavor (and nodes).

    `default_image` is the container's image when the workload names none; `sharing` the
    cluster's GPU sharing mechanism (see the module) and `card_uuids` its nodes' card UUIDs.
    """
    name = spec.ref.job_names[spec.pod_sets.index(pod_set)]
    labels = {
        **{str(k): str(v) for k, v in spec.labels.items()},
        **job_labels(
            workload_id=spec.workload_id, queue_path=spec.queue_path,
            pod_set_index=pod_set.index, flavor=pod_set.flavor,
        ),
    }
    fields = sharing_fields(pod_set, sharing, card_uuids, kai_queue)
    labels.update({k: v for k, v in fields.labels.items() if k == KAI_QUEUE_LABEL})
    annotations = {"allot.io/workload-name": spec.name, **spec.annotations}
    requests: dict[str, str] = {}
    if pod_set.cpu:
        requests["cpu"] = format_cpu(pod_set.cpu)
    if pod_set.memory_gib:
        requests["memory"] = format_memory(pod_set.memory_gib)
    limits: dict[str, str] = {}
    pod_annotations = {**annotations, **fields.annotations}
    pod_labels = {**labels, **fields.labels}
    if fields.gpu_limits is not None:
        limits.update(fields.gpu_limits)
    elif pod_set.gpus:
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
    if fields.scheduler_name:
        pod_spec["schedulerName"] = fields.scheduler_name
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
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    }
