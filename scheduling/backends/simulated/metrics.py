"""A DCGM-format exporter for a simulated cluster's GPUs (what dcgm-exporter serves).

One sample per GPU per metric, labelled as dcgm-exporter labels them in Kubernetes:
`gpu, UUID, pci_bus_id, device, modelName, Hostname, container, namespace, pod`. GPUs held by a
running pod carry the pod's namespace/pod/container; idle GPUs carry empty pod labels and zero
values. A card shared by fractional pods has one sample per pod on it (as HAMi's per-container
exporter reports them), each with that pod's share of the card: its utilisation and engine
activity scaled by its fraction, its memory within its slice; so efficiency is per workload.
A pod's figures are a pure function of its name, so billing tests can predict them:

    util = pod_gpu_util(pod)                         # whole percent, 40..95
    fb_used = pod_fb_used_mib(pod, fb_total_mib)     # MiB, 30%..90% of the card
    gr_engine_active = util / 100                    # ratio
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q

from scheduling.backends.naming import LABEL_SIM_GPU_UTIL, pod_name

logger = logging.getLogger(__name__)

CONTAINER = "main"  # the container name the Kubernetes backend gives every pod
DEFAULT_FB_GIB = 80
MODEL_NAMES = {
    "a100-80g": "NVIDIA A100-SXM4-80GB",
    "a100-40g": "NVIDIA A100-SXM4-40GB",
    "h100": "NVIDIA H100 80GB HBM3",
    "h100-80g": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
    "l40s": "NVIDIA L40S",
    "v100": "Tesla V100-SXM2-32GB",
    "t4": "Tesla T4",
}
METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
)
# Suspended jobs hold their GPUs during the grace period; no grace lasts longer than this.
MAX_GRACE_WINDOW = timedelta(days=1)


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def pod_gpu_util(pod: str) -> int:
    """GPU utilisation in percent of every GPU a pod holds: 40..95, from the pod's name."""
    return 40 + _hash(pod) % 56


def pod_fb_used_mib(pod: str, fb_total_mib: int) -> int:
    """Framebuffer used by a pod on each of its GPUs: 30%..90% of the card, from its name."""
    return fb_total_mib * (30 + _hash(f"fb:{pod}") % 61) // 100


def job_gpu_util(job: Any, pod: str) -> int:
    """A simulated pod's utilisation: its Job's `allot.io/simulated-gpu-util` label (0..100)
    when it has one (a quiet notebook), else `pod_gpu_util`."""
    raw = (job.labels or {}).get(LABEL_SIM_GPU_UTIL)
    if raw is not None:
        try:
            return max(0, min(100, int(raw)))
        except (TypeError, ValueError):
            pass
    return pod_gpu_util(pod)


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    """A stable UUID per simulated GPU, in NVIDIA's `GPU-<uuid>` form."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{cluster}.{node}.gpu{index}.allot.sim')}"


def model_name(flavor: str) -> str:
    """The product name dcgm-exporter reports for a flavor's cards."""
    return MODEL_NAMES.get(flavor, f"NVIDIA {flavor.upper()}")


@dataclass(frozen=True)
class GpuSample:
    """One GPU's figures and labels at one instant."""

    node: str
    index: int
    uuid: str
    model: str
    fb_total_mib: int
    namespace: str = ""
    pod: str = ""
    container: str = ""
    util: int = 0
    fb_used_mib: int = 0

    @property
    def gr_engine_active(self) -> float:
        return self.util / 100

    def labels(self) -> list[tuple[str, str]]:
        return [
            ("gpu", str(self.index)),
            ("UUID", self.uuid),
            ("pci_bus_id", f"00000000:{0x07 + self.index * 8:02X}:00.0"),
            ("device", f"nvidia{self.index}"),
            ("modelName", self.model),
            ("Hostname", self.node),
            ("container", self.container),
            ("namespace", self.namespace),
            ("pod", self.pod),
        ]


def _holding_pods(job: Any, now: datetime) -> int:
    """How many of a job's pods hold their GPUs at `now` (running, or terminating in grace)."""
    if job.suspended:
        if job.suspended_at is None or job.started_at is None:
            return 0
        grace_wall = job.termination_grace_s / job.speedup
        if (now - job.suspended_at).total_seconds() >= grace_wall:
            return 0
        return job.pods_at(job.suspended_at, ignore_suspend=True).running
    return job.pods_at(now).running


def gpu_samples(cluster: Any, now: datetime) -> list[GpuSample]:
    """Every GPU of the cluster's nodes with the pod holding it (if any) at `now`."""
    from scheduling.backends.simulated.models import SimJob
    from scheduling.models import Node

    nodes = list(
        Node.objects.filter(cluster=cluster, gpus__gt=0).select_related("flavor").order_by("name")
    )
    jobs = SimJob.objects.filter(cluster=cluster).filter(
        Q(suspended=False) | Q(suspended_at__gte=now - MAX_GRACE_WINDOW)
    ).order_by("created_at", "name")
    holders: dict[str, list[tuple[str, str, int, int]]] = {}
    sharers: dict[tuple[str, int], list[tuple[str, str, Decimal, int]]] = {}
    for job in jobs:
        holding = _holding_pods(job, now)
        share = Decimal(job.gpus_per_pod)
        for k in range(min(holding, len(job.nodes))):
            if 0 < share < 1:
                cards = job.cards or []
                card = cards[k] if k < len(cards) and cards[k] is not None else 0
                pod = pod_name(job.name, k)
                sharers.setdefault((job.nodes[k], int(card)), []).append(
                    (job.namespace, pod, share, job_gpu_util(job, pod)))
                continue
            pod = pod_name(job.name, k)
            holders.setdefault(job.nodes[k], []).append(
                (job.namespace, pod, int(share), job_gpu_util(job, pod))
            )
    samples = []
    for node in nodes:
        fb_total = int(node.flavor.gpu_memory_gib or DEFAULT_FB_GIB) * 1024
        owner: list[tuple[str, str, int] | None] = [None] * node.gpus
        shared = {card for (name, card) in sharers if name == node.name}
        # Whole cards go to the pods in order, on the cards no fraction shares.
        whole = [i for i in range(node.gpus) if i not in shared]
        free = 0
        for namespace, pod, gpus, util in holders.get(node.name, []):
            if free + gpus > len(whole):
                logger.warning(
                    "simulated cluster %s: node %s has %d GPUs, pod %s/%s does not fit",
                    cluster.name, node.name, node.gpus, namespace, pod,
                )
                continue
            for i in whole[free:free + gpus]:
                owner[i] = (namespace, pod, util)
            free += gpus
        for index in range(node.gpus):
            idle = GpuSample(
                node=node.name, index=index, uuid=gpu_uuid(cluster.name, node.name, index),
                model=model_name(node.flavor.name), fb_total_mib=fb_total,
            )
            held = owner[index]
            if index in shared:
                for namespace, pod, share, util in sharers[(node.name, index)]:
                    samples.append(replace(
                        idle, namespace=namespace, pod=pod, container=CONTAINER,
                        util=int(util * share),
                        fb_used_mib=pod_fb_used_mib(pod, int(fb_total * share)),
                    ))
            elif held is None:
                samples.append(idle)
            else:
                namespace, pod, util = held
                samples.append(replace(
                    idle, namespace=namespace, pod=pod, container=CONTAINER,
                    util=util, fb_used_mib=pod_fb_used_mib(pod, fb_total),
                ))
    return samples


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(sample: GpuSample, metric: str) -> str:
    if metric == "DCGM_FI_DEV_GPU_UTIL":
        return str(sample.util)
    if metric == "DCGM_FI_DEV_FB_USED":
        return str(sample.fb_used_mib)
    if metric == "DCGM_FI_DEV_FB_FREE":
        return str(sample.fb_total_mib - sample.fb_used_mib)
    return f"{sample.gr_engine_active:.6f}"


def render_metrics(samples: list[GpuSample]) -> str:
    """The Prometheus text exposition (format 0.0.4) of the samples."""
    labels = [
        "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sample.labels()) + "}"
        for sample in samples
    ]
    lines: list[str] = []
    for metric, help_text in METRICS:
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        lines.extend(
            f"{metric}{text} {_value(sample, metric)}"
            for sample, text in zip(samples, labels, strict=True)
        )
    return "\n".join(lines) + "\n"
