"""`trainer.kubeflow.org/v1alpha1` TrainJob: one pod set, `spec.trainer.numNodes` nodes each
asking `spec.trainer.resourcesPerNode` (the runtime's pod template is on the cluster, not in
the manifest, so these two are what Allot counts); held back by `spec.suspend`; placement is
written as a runtime patch of the trainer's replicated Job `node`; finished by Complete /
Failed."""

from __future__ import annotations

from typing import Any

from scheduling.kinds.base import (
    DerivedPodSet,
    Kind,
    ManifestError,
    Placement,
    conditions_state,
    get,
    merge_placement,
    pod_set,
    replicas,
)

MANAGER = "allot.io/manager"
TRAINER_JOB = "node"


def _derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    if not get(obj, "spec.runtimeRef.name"):
        raise ManifestError(kind, "spec.runtimeRef.name", "required: the training runtime")
    nodes = replicas(kind, get(obj, "spec.trainer.numNodes"), "spec.trainer.numNodes")
    resources = get(obj, "spec.trainer.resourcesPerNode")
    if not isinstance(resources, dict) or not resources:
        raise ManifestError(kind, "spec.trainer.resourcesPerNode", "required: Allot counts "
                            "quota from it (the runtime's own requests are not read)")
    template = {"spec": {"containers": [{"name": TRAINER_JOB, "resources": resources}]}}
    sets = [pod_set(kind, TRAINER_JOB, nodes, template, "spec.trainer")]
    sets[0].path = "spec.trainer.resourcesPerNode"
    return [s for s in sets if s.count]


def _placement(obj: dict[str, Any], sets: list[DerivedPodSet], where: list[Placement]) -> None:
    template: dict[str, Any] = {"metadata": {}, "spec": {}}
    merge_placement(template, where[0], gated=False)
    # Runtime patches take only what the trainer lets managers change.
    spec = {k: v for k, v in template["spec"].items()
            if k in ("nodeSelector", "affinity", "tolerations")}
    meta = {"labels": template["metadata"]["labels"]}
    patches = [p for p in get(obj, "spec.runtimePatches") or [] if p.get("manager") != MANAGER]
    patches.append({"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": TRAINER_JOB, "template": {"spec": {"template": {
            "metadata": meta, "spec": spec}}}}]}}}})
    obj.setdefault("spec", {})["runtimePatches"] = patches


TRAINJOB = Kind(
    api_version="trainer.kubeflow.org/v1alpha1", kind="TrainJob", plural="trainjobs",
    derive_fn=_derive, placement_fn=_placement,
    state_fn=lambda o: conditions_state(o, success=("Complete",), failure=("Failed",)),
    doc="One pod set: numNodes x resourcesPerNode.",
)
