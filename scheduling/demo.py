"""Demo workloads for `make run`, so the seeded organisation lives on the simulated clusters:
research floods the A100s (borrowing up to the fleet), product arrives a minute later within
its guarantee and reclaims, victims are requeued after their grace, and everything finishes
(the demo clusters run 60x faster than the wall clock).

Called by `seed_demo` (portal/demo.py); idempotent: it submits only when no workload exists.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from quotas.models import Queue, TeamMembership
from scheduling.backends.naming import LABEL_SIM_GPU_UTIL
from scheduling.models import Workload, WorkloadEvent
from scheduling.services import event_new, user_leaf_queues, workload_submit

# (leaf path, name, pods, GPUs per pod, flavor, duration s, delay s, priority class)
PLAN: list[tuple[str, str, int, int, str, int, int, str]] = [
    ("research/vision/detection", "detr-sweep-1", 1, 8, "a100-80g", 3600, 0, "training"),
    ("research/vision/detection", "detr-sweep-2", 1, 8, "a100-80g", 5400, 0, "training"),
    ("research/vision/detection", "detr-large", 2, 8, "a100-80g", 7200, 0, "training"),
    ("research/vision/segmentation", "sam-finetune", 1, 8, "a100-80g", 2700, 0, "training"),
    ("research/vision/segmentation", "mask-eval", 1, 8, "a100-80g", 1800, 0, "batch-low"),
    ("research/robotics", "policy-rl-1", 1, 8, "a100-80g", 4800, 0, "training"),
    ("research/robotics", "policy-rl-2", 1, 8, "a100-80g", 3600, 0, "training"),
    ("research/nlp/llm", "llm-pretrain", 2, 8, "h100-80g", 7200, 0, "training"),
    ("research/nlp/speech", "asr-small", 1, 4, "h100-80g", 2400, 0, "training"),
    # A minute later, product's guaranteed work arrives on a full A100 fleet: reclaim.
    ("product/recsys", "ranker-daily", 2, 8, "a100-80g", 3600, 60, "training"),
    ("product/search", "search-serving", 1, 8, "a100-80g", 9000, 60, "inference-high"),
    ("research/vision/detection", "detr-sweep-3", 1, 8, "a100-80g", 3600, 90, "training"),
]


def _container(name: str, gpus: int, cpu: str, memory: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"name": name, "image": "registry.local/train:demo",
            "resources": {"requests": {"cpu": cpu, "memory": memory, **limits},
                          "limits": limits}}


def _template(name: str, gpus: int, cpu: str = "8", memory: str = "64Gi") -> dict[str, Any]:
    return {"spec": {"containers": [_container(name, gpus, cpu, memory)]}}


# Workloads submitted as manifests, next to the plain Jobs: (leaf path, flavor, duration s,
# priority class, manifest). The simulated clusters serve every kind.
MANIFEST_PLAN: list[tuple[str, str, int, str, dict[str, Any]]] = [
    ("research/nlp/llm", "h100-80g", 5400, "training", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "llama-ddp"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": _template("pytorch", 4)},
            "Worker": {"replicas": 1, "template": _template("pytorch", 4)}}}}),
    ("research/robotics", "a100-80g", 3600, "training", {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "ray-tune-grasp"},
        "spec": {"entrypoint": "python tune.py", "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": _template("ray-head", 0, "4",
                                                                        "16Gi")},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "rayStartParams": {},
                                  "template": _template("ray-worker", 2)}]}}}),
    ("product/search", "a100-80g", 9000, "inference-high", {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm-serving"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 2, "workerTemplate": _template("vllm", 4)}}}),
]
# An interactive session left idle (its simulated GPU reports 2 %): the leaf's idle limit
# warns, then stops it (scheduling/sessions.py; with the beat's billing.cull_idle_sessions).
NOTEBOOK = ("research/robotics", "a100-80g", "jupyter-grasp", 900)
SUMMARY = (f"  demo workloads: {len(PLAN)} Jobs and {len(MANIFEST_PLAN)} manifests (a PyTorchJob, "
           "a RayJob, a LeaderWorkerSet) and an idle notebook (stopped after 15 min idle); "
           "research floods the A100s, product reclaims at +60s")


def _submitter(queue: Queue) -> Any:
    """A member whose team may use the leaf, else a platform admin."""
    for m in TeamMembership.objects.select_related("user").order_by("team__name", "user_id"):
        if user_leaf_queues(m.user).filter(pk=queue.pk).exists():
            return m.user
    return get_user_model().objects.filter(is_superuser=True).order_by("pk").first()


def seed() -> list[str]:
    """Submit the demo workloads unless some workload exists (idempotent)."""
    if Workload.objects.exists():
        return [SUMMARY]
    now = timezone.now()
    for path, name, pods, gpus, flavor, duration, delay, priority in PLAN:
        queue = Queue.objects.filter(path=path, children__isnull=True).first()
        user = _submitter(queue) if queue is not None else None
        if queue is None or user is None:
            continue
        w = workload_submit(user=user, now=now, nudge=False, data={
            "name": name, "queue": path, "priority_class": priority, "preemptible": True,
            "checkpoint": True, "image": "registry.local/train:demo",
            "command": ["python", "train.py"], "duration_hint_s": duration,
            "termination_grace_s": 30,
            "pods": [{"count": pods, "flavors": [flavor], "gpus": gpus, "cpu": 8,
                      "memory_gib": 64}],
        })
        if delay and w.state == "pending":
            w.not_before = now + timedelta(seconds=delay)
            w.save(update_fields=["not_before"])
            WorkloadEvent.objects.bulk_create([event_new(
                w, "reason", at=now, message=f"demo: held back {delay}s, so its arrival "
                "shows a reclaim")])
    for path, flavor, duration, priority, manifest in MANIFEST_PLAN:
        queue = Queue.objects.filter(path=path, children__isnull=True).first()
        user = _submitter(queue) if queue is not None else None
        if queue is None or user is None:
            continue
        workload_submit(user=user, now=now, nudge=False, data={
            "queue": path, "manifest": manifest, "flavors": [flavor],
            "priority_class": priority, "duration_hint_s": duration})
    path, flavor, name, idle_s = NOTEBOOK
    queue = Queue.objects.filter(path=path, children__isnull=True).first()
    user = _submitter(queue) if queue is not None else None
    if queue is not None and user is not None:
        if queue.idle_timeout_s is None:
            queue.idle_timeout_s = idle_s
            queue.save(update_fields=["idle_timeout_s"])
        workload_submit(user=user, now=now, nudge=False, data={
            "name": name, "queue": path, "priority_class": "inference-high",
            "preemptible": False, "image": "quay.io/jupyter/pytorch-notebook:2024-10-07",
            "command": ["start-notebook.py"], "interactive": True,
            "labels": {LABEL_SIM_GPU_UTIL: "2"},
            "pods": [{"count": 1, "flavors": [flavor], "gpus": 1, "cpu": 4, "memory_gib": 32}],
        })
    return [SUMMARY]
