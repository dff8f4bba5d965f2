"""Names and labels of the cluster objects of a workload, shared by backends, billing and pages.

Each pod set of workload W is a Job `allot-w<W>-<index>` in the leaf queue's namespace; its
pods are `<job name>-<k>`. Labels link every object back to Allot. Pure Python.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

LABEL_WORKLOAD_ID = "allot.io/workload-id"
LABEL_QUEUE = "allot.io/queue"
LABEL_POD_SET = "allot.io/pod-set"
LABEL_FLAVOR = "allot.io/flavor"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_KIND = "allot.io/kind"  # a simulated Job's workload kind (apiVersion/Kind)
# On a workload adopted from a cluster (the admission webhook): the cluster it must run on and
# the name of its object there (created by the user, not by Allot).
LABEL_PINNED_CLUSTER = "allot.io/cluster"
LABEL_OBJECT = "allot.io/object"
# On each workload of a kind of independent gangs (a LeaderWorkerSet's replica groups): the
# name of the whole it was submitted as, and its group index there.
LABEL_GANG_OF = "allot.io/gang-of"
LABEL_GANG = "allot.io/gang"
# The labels the LeaderWorkerSet controller puts on each pod of a group (leaderworkerset.x-k8s.io
# v1): the object's name, the group's index, and the pod's index in its group (0: the leader).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# On an adopted LeaderWorkerSet of several groups: its groups' workload ids, in group order.
ANNOTATION_GROUP_WORKLOADS = "allot.io/group-workloads"
# On a scale-up of a running scalable workload (a Deployment's added pods): its id.
LABEL_SCALE_OF = "allot.io/scale-of"
MANAGED_BY = "allot"
# Pods reach the KAI Scheduler by its scheduler name and a queue label (the KAI queue they are
# admitted in; its `gpu-fraction` annotation is read by KAI only).
KAI_SCHEDULER = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
# A simulated cluster's pods report this GPU utilisation (percent) instead of the one their
# name gives (the demo's and the tests' quiet notebook); a workload label, passed to its Jobs.
LABEL_SIM_GPU_UTIL = "allot.io/simulated-gpu-util"

_JOB_RE = re.compile(r"^allot-w(?P<workload>\d+)-(?P<index>\d+)$")
# Simulated pods are `<job>-<k>`; real ones `<job>-<random>` or, for Indexed Jobs,
# `<job>-<completion index>-<random>`; the pods of the other kinds' objects are named by their
# controllers after the object (`<object>-worker-0`, `<object>-workers-0-1-<random>`,
# `<object>-<random>-head-<random>`, ...): every one starts with `<object>-`.
_POD_RE = re.compile(
    r"^allot-w(?P<workload>\d+)-(?P<index>\d+)-[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def adopted_group(labels: Mapping[str, Any] | None) -> int | None:
    """The replica group a workload is of the user's own object (an adopted LeaderWorkerSet:
    each group a workload, the object one), or None."""
    labels = labels or {}
    raw = str(labels.get(LABEL_GANG, ""))
    if LABEL_OBJECT in labels and raw.isdigit():
        return int(raw)
    return None


def job_name(workload_id: int, pod_set_index: int) -> str:
    """The Job name of one pod set of a workload."""
    return f"allot-w{int(workload_id)}-{int(pod_set_index)}"


def pod_name(job: str, k: int) -> str:
    """The name of the k-th pod (0-based) of a Job, as the simulated cluster names it."""
    return f"{job}-{int(k)}"


def queue_label(queue_path: str) -> str:
    """A queue path as a label value: `/` is not allowed in label values, so it becomes `.`."""
    return queue_path.replace("/", ".")


def parse_job_name(name: str) -> tuple[int, int] | None:
    """(workload id, pod set index) of an Allot Job name, or None for any other name."""
    match = _JOB_RE.match(name)
    if match is None:
        return None
    return int(match["workload"]), int(match["index"])


def parse_pod_name(name: str) -> tuple[int, int] | None:
    """(workload id, pod set index) of a pod of an Allot Job, simulated or real.

    Every pod name starts with its Job name, which is what billing joins on.
    """
    match = _POD_RE.match(name)
    if match is None:
        return None
    return int(match["workload"]), int(match["index"])


class PodOwners:
    """Which workload a pod is of, from its name and namespace (what DCGM telemetry carries).

    An object Allot named is found from the name itself (`parse_pod_name`); an object adopted
    from a cluster keeps its own name (`adopted`: (namespace, object name) -> workload id), so
    its pods are found by the longest `<object name>-` their name starts with, in its
    namespace (a pod of another object whose name extends an adopted one's and is not
    Allot's would be taken for it: controllers name pods after their object, nothing else).
    A replica group of an adopted LeaderWorkerSet is a workload of its own, named here
    `<object name>-<group index>`: its leader pod has that very name, its workers
    `<object name>-<group index>-<worker index>`.
    """

    def __init__(self, adopted: dict[tuple[str, str], int] | None = None):
        self.by_namespace: dict[str, list[tuple[str, int]]] = {}
        for (namespace, name), workload_id in (adopted or {}).items():
            self.by_namespace.setdefault(namespace, []).append((f"{name}-", workload_id))
        for names in self.by_namespace.values():
            names.sort(key=lambda item: -len(item[0]))  # the longest prefix first

    def workload_of(self, namespace: str, pod: str) -> int | None:
        """The workload id of pod `pod` in `namespace`, or None for a pod of no workload."""
        parsed = parse_pod_name(pod)
        if parsed is not None:
            return parsed[0]
        for prefix, workload_id in self.by_namespace.get(namespace, ()):
            if (pod.startswith(prefix) and len(pod) > len(prefix)) or pod == prefix[:-1]:
                return workload_id
        return None


def job_labels(
    *, workload_id: int, queue_path: str, pod_set_index: int, flavor: str
) -> dict[str, str]:
    """The labels every Job (and its pod template) of a workload carries."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_WORKLOAD_ID: str(int(workload_id)),
        LABEL_QUEUE: queue_label(queue_path),
        LABEL_POD_SET: str(int(pod_set_index)),
        LABEL_FLAVOR: flavor,
    }


# Per-pod card pins (HAMi): the card UUID of each pod index of the template, comma-separated,
# and the label that sends the template's pods to Allot's admission webhook for pods.
CARDS_ANNOTATION = "allot.io/gpu-cards"
CARDS_STRIDE_ANNOTATION = "allot.io/gpu-cards-stride"
PIN_LABEL = "allot.io/pin-cards"
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"  # HAMi's pod annotation: the cards a pod may use


def pod_card_pin(pod: Mapping[str, Any]) -> str | None:
    """The card UUID a pod of a pinned template must use (`allot.io/gpu-cards` at the pod's
    index), or None when it has no such list or no index. The index is the Job's completion
    index (`batch.kubernetes.io/job-completion-index`; a JobSet's pods add their Job's
    `jobset.sigs.k8s.io/job-index` times `allot.io/gpu-cards-stride`), else Kubeflow's
    `training.kubeflow.org/replica-index`, else a StatefulSet's `apps.kubernetes.io/pod-index`.
    """
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    cards = [c for c in str(annotations.get(CARDS_ANNOTATION) or "").split(",") if c]
    if not cards:
        return None

    def number(key: str) -> int | None:
        raw = str(annotations.get(key, labels.get(key, "")))
        return int(raw) if raw.isdigit() else None

    index = number("batch.kubernetes.io/job-completion-index")
    if index is not None:
        job = number("jobset.sigs.k8s.io/job-index")
        if job is not None:
            stride = number(CARDS_STRIDE_ANNOTATION)
            if not stride:
                return None  # which of the JobSet's Jobs: unknown without the stride
            index += job * stride
    else:
        index = number("training.kubeflow.org/replica-index")
    if index is None:
        index = number("apps.kubernetes.io/pod-index")
    if index is None or index >= len(cards):
        return None
    return cards[index]
