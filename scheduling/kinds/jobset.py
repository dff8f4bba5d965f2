"""`jobset.x-k8s.io/v1alpha2` JobSet: one pod set per replicated Job (replicas x the pods of
one Job), held back by `spec.suspend`; finished by its Completed / Failed conditions."""

from __future__ import annotations

from typing import Any

from scheduling.backends.naming import CARDS_ANNOTATION, CARDS_STRIDE_ANNOTATION
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
from scheduling.kinds.job import job_pods


def _derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    jobs = get(obj, "spec.replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        raise ManifestError(kind, "spec.replicatedJobs", "required: at least one replicated Job")
    sets = []
    for i, rj in enumerate(jobs):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            raise ManifestError(kind, where, "expected an object")
        n = replicas(kind, rj.get("replicas"), f"{where}.replicas")
        pods = job_pods(kind, get(rj, "template.spec"), f"{where}.template.spec")
        if n * pods:
            sets.append(pod_set(kind, str(rj.get("name") or i), n * pods,
                                get(rj, "template.spec.template"),
                                f"{where}.template.spec.template"))
    return sets


def _placement(obj: dict[str, Any], sets: list[DerivedPodSet], where: list[Placement]) -> None:
    """Each replicated Job's pod template takes its placement; one pinned per pod (HAMi's
    cards, `allot.io/gpu-cards` over the replicas' pods in order) also says how many pods
    one of its Jobs runs, so a pod's place is its Job's index times that plus its own."""
    for ps, place in zip(sets, where, strict=False):
        merge_placement(ps.template, place, gated=False)
        annotations = ps.template["metadata"]["annotations"]
        if CARDS_ANNOTATION in annotations:
            rj = next(j for j in obj["spec"]["replicatedJobs"]
                      if get(j, "template.spec.template") is ps.template)
            annotations[CARDS_STRIDE_ANNOTATION] = str(
                ps.count // replicas("JobSet", rj.get("replicas"), "replicas"))


JOBSET = Kind(
    api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet", plural="jobsets", derive_fn=_derive,
    placement_fn=_placement,
    state_fn=lambda o: conditions_state(o, success=("Completed",), failure=("Failed",)),
    doc="A pod set per replicated Job: replicas x parallelism pods.",
)
