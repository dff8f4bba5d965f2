"""`leaderworkerset.x-k8s.io/v1` LeaderWorkerSet: `replicas` groups of `size` pods (a leader
and size-1 workers); the leaders are one pod set, the workers another. Each replica group is
a gang of its own (`gangs`): a submission of `replicas` groups becomes that many workloads,
each a LeaderWorkerSet of one group (`replicas: 1`), admitted, placed, preempted and billed on
its own. It has no suspend field: its pods are created with a scheduling gate that Allot
lifts once admitted. It serves until deleted. One adopted from a cluster (the webhook) stays
the user's one object, its groups workloads of their own whose pods are lifted group by group
(scheduling/backends/k8s/groups.py)."""

from __future__ import annotations

import copy
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

BASE = "spec.leaderWorkerTemplate"


def _derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    groups = replicas(kind, get(obj, "spec.replicas"), "spec.replicas")
    size = replicas(kind, get(obj, f"{BASE}.size"), f"{BASE}.size", minimum=1)
    worker = get(obj, f"{BASE}.workerTemplate")
    if worker is None:
        raise ManifestError(kind, f"{BASE}.workerTemplate", "required: the workers' pod template")
    leader = get(obj, f"{BASE}.leaderTemplate")
    if leader is None:
        leader_set = pod_set(kind, "leader", groups, worker, f"{BASE}.workerTemplate")
    else:
        leader_set = pod_set(kind, "leader", groups, leader, f"{BASE}.leaderTemplate")
    sets = [leader_set]
    if size > 1:
        sets.append(pod_set(kind, "workers", groups * (size - 1), worker,
                            f"{BASE}.workerTemplate"))
    return [s for s in sets if s.count]


def _placement(obj: dict[str, Any], sets: list[DerivedPodSet], where: list[Placement]) -> None:
    base = get(obj, BASE)
    if base.get("leaderTemplate") is None:
        # The leaders use the workers' template: give them a copy of their own to place.
        base["leaderTemplate"] = copy.deepcopy(base["workerTemplate"])
    templates = [base["leaderTemplate"], base["workerTemplate"]]
    for template, place in zip(templates, where, strict=False):
        merge_placement(template, place, gated=True)


def _gangs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """One LeaderWorkerSet of one group per replica group (none for `replicas: 0`)."""
    groups = replicas("LeaderWorkerSet", get(obj, "spec.replicas"), "spec.replicas")
    if groups == 1:
        return [obj]
    one = copy.deepcopy(obj)
    one.setdefault("spec", {})["replicas"] = 1
    return [copy.deepcopy(one) for _ in range(groups)]


LWS = Kind(
    api_version="leaderworkerset.x-k8s.io/v1", kind="LeaderWorkerSet",
    plural="leaderworkersets", derive_fn=_derive, suspend_path="", serving=True,
    placement_fn=_placement, gangs_fn=_gangs, state_fn=lambda o: RunState(),
    doc="A gang per replica group (a leader and size-1 workers); pods gated until admitted.",
)
