"""`apps/v1` Deployment and StatefulSet, for serving: one pod set of `replicas` pods (default
1). Neither can be suspended: their pods are created with a scheduling gate (their template
keeps it) that Allot lifts from as many pods as are admitted, and a preempted one's pods are
deleted (its controller makes them again, gated). Both scale (`scalable`): pods a scale-up
adds wait gated for an admission of their own; a scale-down releases the removed pods' quota.
They serve until deleted."""

from __future__ import annotations

from typing import Any

from scheduling.kinds.base import DerivedPodSet, Kind, RunState, get, pod_set, replicas


def _derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    n = replicas(kind, get(obj, "spec.replicas"), "spec.replicas")
    if n == 0:
        return []
    return [pod_set(kind, "replicas", n, get(obj, "spec.template"), "spec.template")]


DEPLOYMENT = Kind(
    api_version="apps/v1", kind="Deployment", plural="deployments", derive_fn=_derive,
    suspend_path="", serving=True, scalable=True, state_fn=lambda o: RunState(),
    doc="One pod set of replicas pods, gated until admitted.",
)
STATEFULSET = Kind(
    api_version="apps/v1", kind="StatefulSet", plural="statefulsets", derive_fn=_derive,
    suspend_path="", serving=True, scalable=True, state_fn=lambda o: RunState(),
    doc="One pod set of replicas pods, gated until admitted.",
)
