"""`ray.io/v1` RayCluster and RayJob: a head pod set (1 pod) and one per worker group
(`replicas` x `numOfHosts` pods); a RayJob submitting in K8sJobMode (the default) adds its
submitter pod (its `submitterPodTemplate`, else KubeRay's default 500m cpu / 200Mi). Both are
held back by `spec.suspend`. A RayJob is finished by `status.jobDeploymentStatus` (Complete
with jobStatus SUCCEEDED, or Failed); a RayCluster runs until deleted."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scheduling.kinds.base import (
    DerivedPodSet,
    Kind,
    ManifestError,
    Placement,
    RunState,
    get,
    merge_placement,
    pod_set,
    replicas,
)


def cluster_sets(kind: str, spec: Any, path: str) -> list[DerivedPodSet]:
    """The head and worker groups of a RayCluster spec found at `path`."""
    if not isinstance(spec, dict):
        raise ManifestError(kind, path, "required: the Ray cluster spec")
    sets = [pod_set(kind, "head", 1, get(spec, "headGroupSpec.template"),
                    f"{path}.headGroupSpec.template")]
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise ManifestError(kind, f"{path}.workerGroupSpecs", "expected a list")
    for i, group in enumerate(groups):
        where = f"{path}.workerGroupSpecs[{i}]"
        if not isinstance(group, dict):
            raise ManifestError(kind, where, "expected an object")
        minimum = replicas(kind, group.get("minReplicas"), f"{where}.minReplicas", default=0)
        n = replicas(kind, group.get("replicas"), f"{where}.replicas", default=minimum)
        hosts = replicas(kind, group.get("numOfHosts"), f"{where}.numOfHosts", minimum=1)
        if n * hosts:
            sets.append(pod_set(kind, str(group.get("groupName") or f"workers-{i}"), n * hosts,
                                group.get("template"), f"{where}.template"))
    return sets


def _cluster(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    return cluster_sets(kind, obj.get("spec"), "spec")


def _submits_with_job(obj: Mapping[str, Any]) -> bool:
    return get(obj, "spec.submissionMode") in (None, "K8sJobMode")


def _default_submitter(obj: Mapping[str, Any]) -> dict[str, Any]:
    head = get(obj, "spec.rayClusterSpec.headGroupSpec.template.spec.containers") or [{}]
    image = head[0].get("image", "") if isinstance(head[0], Mapping) else ""
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": image,
        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}}}]}}


def _job(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    sets = cluster_sets(kind, get(obj, "spec.rayClusterSpec"), "spec.rayClusterSpec")
    if _submits_with_job(obj):
        template = get(obj, "spec.submitterPodTemplate")
        if template is None:
            template = _default_submitter(obj)
        sets.append(pod_set(kind, "submitter", 1, template, "spec.submitterPodTemplate"))
    return sets


def _job_placement(obj: dict[str, Any], sets: list[DerivedPodSet],
                   where: list[Placement]) -> None:
    for ps, place in zip(sets, where, strict=False):
        merge_placement(ps.template, place, gated=False)
    if _submits_with_job(obj) and get(obj, "spec.submitterPodTemplate") is None:
        obj["spec"]["submitterPodTemplate"] = copy.deepcopy(sets[-1].template)


def _job_state(obj: Mapping[str, Any]) -> RunState:
    deployment = get(obj, "status.jobDeploymentStatus")
    job_status = get(obj, "status.jobStatus")
    message = str(get(obj, "status.message") or "")
    if deployment == "Failed" or (deployment == "Complete" and job_status == "FAILED"):
        return RunState(failed=True, message=f"{get(obj, 'status.reason') or 'Failed'}: "
                        f"{message}".strip())
    if deployment == "Complete":
        return RunState(succeeded=True, message=message)
    return RunState()


def _cluster_state(obj: Mapping[str, Any]) -> RunState:
    if get(obj, "status.state") == "failed":
        return RunState(failed=True, message=str(get(obj, "status.reason") or "failed"))
    return RunState()


RAYJOB = Kind(
    api_version="ray.io/v1", kind="RayJob", plural="rayjobs", derive_fn=_job,
    state_fn=_job_state, placement_fn=_job_placement,
    doc="Head (1), each worker group (replicas x numOfHosts), the submitter (1).",
)
RAYCLUSTER = Kind(
    api_version="ray.io/v1", kind="RayCluster", plural="rayclusters", derive_fn=_cluster,
    state_fn=_cluster_state, serving=True,
    doc="Head (1) and each worker group (replicas x numOfHosts); runs until deleted.",
)
