"""What every workload kind shares: a derived pod set (its requests: requests.py, a share of
a card: sharing.py), the error a bad manifest raises (ManifestError), and the `Kind` a module
per kind describes (its pod sets, how it is held back until admitted, how its placement is
written into it, and what its own status says).

Pure Python on plain JSON objects (as the API server speaks them): no Django, no kubernetes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from core.quantity import GIB
from scheduling.kinds.requests import GPU_RESOURCE as GPU_RESOURCE
from scheduling.kinds.requests import ManifestError as ManifestError
from scheduling.kinds.requests import pod_requests as pod_requests
from scheduling.kinds.sharing import (
    HAMI_RESOURCES,
    KAI_FRACTION,
    KAI_MEMORY,
    counted_share,
    gpu_share,
)

HOSTNAME_LABEL = "kubernetes.io/hostname"
# A pod held back until its workload is admitted (kinds without a suspend field).
SCHEDULING_GATE = "allot.io/admission"
ANNOTATION_ADMITTED = "allot.io/admitted"
# On an object of a scalable kind (Deployment, StatefulSet): how many of its pods are admitted.
# Its templates keep the gate; Allot lifts it from that many pods, one pod at a time, so the
# pods a scale-up adds wait gated until their own admission.
ANNOTATION_ADMITTED_PODS = "allot.io/admitted-pods"
MAX_REPLICAS = 100_000
MILLI = Decimal("0.001")  # cpu and memory are counted to the thousandth, rounded up

# How a kind is held back until admitted: its own `suspend` field, or scheduling gates on its
# pods (kinds with no suspend: the controller creates pods, the scheduler leaves them be).
SUSPEND = "suspend"
GATES = "gates"


@dataclass
class DerivedPodSet:
    """One gang of identical pods found in a manifest: `count` pods, each asking `requests`
    (every resource name, as exact amounts: cores, bytes, cards), from the pod template at
    `path` (the template itself is `template`, a part of the manifest)."""

    name: str
    count: int
    path: str
    template: dict[str, Any]
    requests: dict[str, Decimal] = field(default_factory=dict)
    # A share of one card asked the sharing mechanism's way (`gpu_share`): the fraction, a
    # memory slice in MiB, the share of the card's memory; `share_path` is where it was asked.
    gpu_fraction: Decimal | None = None
    gpu_memory_mib: int | None = None
    gpu_memory_share: Decimal | None = None
    share_path: str = ""

    @property
    def gpus(self) -> Decimal:
        """Cards per pod: whole ones, or the fraction asked (0 for a memory slice alone: its
        fraction depends on the card, `counted`)."""
        if self.gpu_fraction is not None:
            return self.gpu_fraction
        return Decimal(int(self.requests.get(GPU_RESOURCE, 0)))

    @property
    def shared(self) -> bool:
        """Asks a share of one card (a fraction, a memory slice or both)."""
        return self.gpu_fraction is not None or self.gpu_memory_mib is not None

    def counted(self, card_gib: Decimal | int | None) -> tuple[Decimal, int | None]:
        """Cards per pod and the memory slice in whole GiB as Allot counts them on cards of
        `card_gib` GiB (`counted_share`; ValueError for a slice alone it cannot count)."""
        if not self.shared:
            return self.gpus, None
        return counted_share(fraction=self.gpu_fraction, memory_mib=self.gpu_memory_mib,
                             memory_share=self.gpu_memory_share, card_gib=card_gib)

    @property
    def cpu(self) -> Decimal:
        return self.requests.get("cpu", Decimal(0)).quantize(MILLI, ROUND_CEILING)

    @property
    def memory_gib(self) -> Decimal:
        return (self.requests.get("memory", Decimal(0)) / GIB).quantize(MILLI, ROUND_CEILING)

    @property
    def other(self) -> dict[str, Decimal]:
        """Resources other than cpu, memory, whole GPUs and HAMi's share of a card (kept for
        the open resource model)."""
        return {k: v for k, v in self.requests.items()
                if k not in ("cpu", "memory", GPU_RESOURCE, *HAMI_RESOURCES)}


def get(obj: Any, path: str, default: Any = None) -> Any:
    """`obj[a][b]...` for the dotted path `a.b...`; `default` when any step is missing."""
    for part in path.split("."):
        if not isinstance(obj, Mapping) or part not in obj:
            return default
        obj = obj[part]
    return obj


def replicas(kind: str, value: Any, path: str, default: int = 1, minimum: int = 0) -> int:
    """A replica count: a whole number (absent: `default`)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(kind, path, f"{value!r} is not a whole number of replicas")
    if value < minimum or value > MAX_REPLICAS:
        raise ManifestError(kind, path, f"{value} is out of range ({minimum}..{MAX_REPLICAS})")
    return value


def pod_set(kind: str, name: str, count: int, template: Any, path: str) -> DerivedPodSet:
    """A derived pod set from a pod template found at `path`."""
    if not isinstance(template, dict):
        raise ManifestError(kind, path, "required: a pod template")
    requests = pod_requests(kind, template, path)
    share = gpu_share(kind, template, path, requests)
    return DerivedPodSet(name=name, count=count, path=path, template=template,
                         requests=share.pop("requests", requests), **share)


@dataclass(frozen=True)
class Placement:
    """Where the pods of one pod set go and what they carry: merged into its pod template."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node_selector: Mapping[str, str]  # the flavor's
    nodes: tuple[str, ...]  # the nodes the engine chose (a required node affinity)
    gpus: bool  # tolerate the GPU taint
    priority_class: str = ""
    termination_grace_s: int | None = None
    # The cluster's GPU sharing mechanism (scheduling/backends/k8s/jobs.py): the scheduler the
    # pods go to (`kai-scheduler`), and for a fraction of a card the GPU container's limits in
    # place of `nvidia.com/gpu` (None: leave them).
    scheduler_name: str = ""
    gpu_limits: Mapping[str, str] | None = None


@dataclass(frozen=True)
class RunState:
    """What a kind's own status says: finished (successfully or not) and a message."""

    succeeded: bool = False
    failed: bool = False
    message: str = ""


def conditions_state(obj: Mapping[str, Any], *, success: tuple[str, ...],
                     failure: tuple[str, ...], path: str = "status.conditions") -> RunState:
    """A RunState from `status.conditions`: a true condition of a failure type fails, of a
    success type succeeds (the usual shape: Kubeflow, JobSet, Job, TrainJob, Ray)."""
    conditions = get(obj, path) or []
    if not isinstance(conditions, list):
        return RunState()
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") in failure and c.get("status") == "True":
            return RunState(failed=True, message=f"{c.get('reason') or c['type']}: "
                            f"{c.get('message') or ''}".strip())
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") in success and c.get("status") == "True":
            return RunState(succeeded=True, message=str(c.get("message") or ""))
    return RunState()


def _set_gpu_limits(spec: dict[str, Any], limits: Mapping[str, str]) -> None:
    """A fraction of a card as the sharing mechanism asks it: the containers asking
    `nvidia.com/gpu` or HAMi's share (else the first) drop them and take `limits`."""
    gpu_fields = (GPU_RESOURCE, *HAMI_RESOURCES)
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    asking = [c for c in containers
              if any(n in ((c.get("resources") or {}).get(part) or {})
                     for n in gpu_fields for part in ("limits", "requests"))]
    for container in asking or containers[:1]:
        resources = container.setdefault("resources", {})
        for part in ("requests", "limits"):
            if isinstance(resources.get(part), dict):
                for name in gpu_fields:
                    resources[part].pop(name, None)
        resources["limits"] = {**(resources.get("limits") or {}), **limits}


def _merge_placement(template: dict[str, Any], where: Placement, *, gated: bool) -> None:
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **where.labels}
    own = dict(meta.get("annotations") or {})
    if where.gpu_limits is not None:  # a fraction: the cluster's mechanism's fields only
        for name in (KAI_FRACTION, KAI_MEMORY):
            own.pop(name, None)
    meta["annotations"] = {**own, **where.annotations}
    spec = template.setdefault("spec", {})
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **where.node_selector}
    if where.priority_class:
        spec["priorityClassName"] = where.priority_class
    if where.termination_grace_s is not None:
        spec["terminationGracePeriodSeconds"] = int(where.termination_grace_s)
    if where.scheduler_name:
        spec["schedulerName"] = where.scheduler_name
    if where.gpu_limits is not None:
        _set_gpu_limits(spec, where.gpu_limits)
    if where.gpus:
        tolerations = list(spec.get("tolerations") or [])
        wanted = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
        if wanted not in tolerations:
            tolerations.append(wanted)
        spec["tolerations"] = tolerations
    if where.nodes:
        term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In",
                                      "values": sorted(set(where.nodes))}]}
        affinity = spec.setdefault("affinity", {})
        node_affinity = affinity.setdefault("nodeAffinity", {})
        required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution",
                                             {})
        terms = required.get("nodeSelectorTerms") or [{}]
        # Terms are ORed: the chosen nodes are ANDed into each of the user's own terms.
        required["nodeSelectorTerms"] = [
            {**t, "matchExpressions": [*(t.get("matchExpressions") or []),
                                       *term["matchExpressions"]]} for t in terms]
    if gated:
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != SCHEDULING_GATE]
        spec["schedulingGates"] = [*gates, {"name": SCHEDULING_GATE}]


@dataclass(frozen=True)
class Kind:
    """One workload kind: its API, its pod sets, its gating and its status.

    `derive(manifest)` finds the pod sets (raising ManifestError); `suspend_path` is the
    dotted path of its suspend field (gating SUSPEND) or empty (GATES); `state(obj)` reads its
    own status; `patch_placement` (optional) writes placement where the kind wants it when
    its pod templates are not in the manifest (TrainJob's runtime patches)."""

    api_version: str
    kind: str
    plural: str
    derive_fn: Callable[[str, dict[str, Any]], list[DerivedPodSet]]
    state_fn: Callable[[Mapping[str, Any]], RunState]
    suspend_path: str = "spec.suspend"
    serving: bool = False  # runs until deleted (no success)
    doc: str = ""
    placement_fn: Callable[[dict[str, Any], list[DerivedPodSet], list[Placement]], None] | None \
        = None
    # Scaled on the cluster by `spec.replicas` (one pod set): pods are ungated one by one up to
    # the admitted count, a scale-up is a new admission, a scale-down releases quota.
    scalable: bool = False
    # A kind made of independent gangs (LeaderWorkerSet's replica groups): the manifest of
    # each, admitted as a workload of its own; None: the whole object is one gang.
    gangs_fn: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None

    @property
    def key(self) -> str:
        """`apiVersion/Kind`, e.g. `kubeflow.org/v1/PyTorchJob` (what Allot stores)."""
        return f"{self.api_version}/{self.kind}"

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def derive(self, manifest: dict[str, Any]) -> list[DerivedPodSet]:
        """The pod sets of `manifest` (at least one), or ManifestError."""
        sets = self.derive_fn(self.kind, manifest)
        if not sets:
            raise ManifestError(self.kind, "spec", "no pods: every replica count is 0")
        return sets

    def gangs(self, manifest: dict[str, Any]) -> list[dict[str, Any]]:
        """The manifests of its independent gangs, each admitted on its own (one: itself)."""
        if self.gangs_fn is None:
            return [manifest]
        return self.gangs_fn(manifest)

    def state(self, obj: Mapping[str, Any]) -> RunState:
        """Finished or failed, from the object's own status."""
        return self.state_fn(obj)

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        """Held back: suspended (SUSPEND), or not marked admitted (GATES)."""
        if self.suspend_path:
            return bool(get(obj, self.suspend_path, False))
        annotations = get(obj, "metadata.annotations") or {}
        return annotations.get(ANNOTATION_ADMITTED) != "true"

    def suspend_patch(self, suspended: bool) -> dict[str, Any]:
        """The merge patch that suspends or resumes the object."""
        if not self.suspend_path:
            return {"metadata": {"annotations": {
                ANNOTATION_ADMITTED: "false" if suspended else "true"}}}
        patch: dict[str, Any] = {}
        cursor = patch
        parts = self.suspend_path.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = suspended
        return patch

    def hold_patch(self, obj: Mapping[str, Any], *, labels: Mapping[str, str]
                   ) -> list[dict[str, Any]]:
        """A JSON patch (admission webhook) holding a user's object back until admitted, as
        `prepare` does (suspended, or its pod templates gated), with `labels` added."""
        held = copy.deepcopy(dict(obj))
        meta = held.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        if self.suspend_path:
            _set_path(held, self.suspend_path, True)
        else:
            meta["annotations"] = {**(meta.get("annotations") or {}),
                                   ANNOTATION_ADMITTED: "false"}
            for ps in self.derive(held):
                spec = ps.template.setdefault("spec", {})
                gates = [g for g in spec.get("schedulingGates") or []
                         if g.get("name") != SCHEDULING_GATE]
                spec["schedulingGates"] = [*gates, {"name": SCHEDULING_GATE}]
        ops = [{"op": "add", "path": "/metadata/labels", "value": meta["labels"]},
               {"op": "add", "path": "/spec", "value": held.get("spec") or {}}]
        if not self.suspend_path:
            ops.append({"op": "add", "path": "/metadata/annotations",
                        "value": meta["annotations"]})
        return ops

    def prepare(self, manifest: Mapping[str, Any], *, name: str, namespace: str,
                labels: Mapping[str, str], annotations: Mapping[str, str],
                placements: list[Placement]) -> dict[str, Any]:
        """The object to create: the manifest renamed into the queue's namespace, held back
        (suspended, or its pods gated), each pod set's template carrying its placement."""
        obj = copy.deepcopy(dict(manifest))
        obj.pop("status", None)
        meta = {k: v for k, v in (obj.get("metadata") or {}).items()
                if k in ("labels", "annotations")}
        meta["name"], meta["namespace"] = name, namespace
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        if not self.suspend_path:
            meta["annotations"][ANNOTATION_ADMITTED] = "false"
        obj["metadata"] = meta
        sets = self.derive(obj)
        if self.scalable:  # all of them, unless the caller says how many are admitted
            meta["annotations"].setdefault(ANNOTATION_ADMITTED_PODS,
                                           str(sum(s.count for s in sets)))
        if self.placement_fn is not None:
            self.placement_fn(obj, sets, placements)
        else:
            for ps, where in zip(sets, placements, strict=False):
                _merge_placement(ps.template, where, gated=not self.suspend_path)
        if self.suspend_path:
            _set_path(obj, self.suspend_path, True)
        return obj


def merge_placement(template: dict[str, Any], where: Placement, *, gated: bool) -> None:
    """Write a placement into one pod template (for kinds with their own placement hook)."""
    _merge_placement(template, where, gated=gated)


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value
