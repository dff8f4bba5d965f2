"""Kubeflow training jobs (`kubeflow.org/v1` PyTorchJob, TFJob, XGBoostJob, JAXJob,
PaddleJob; `kubeflow.org/v2beta1` MPIJob): a pod set per replica type (`replicas` pods,
default 1), held back by `spec.runPolicy.suspend`; finished by Succeeded / Failed."""

from __future__ import annotations

from typing import Any

from scheduling.kinds.base import (
    DerivedPodSet,
    Kind,
    ManifestError,
    conditions_state,
    pod_set,
    replicas,
)

# The coordinating replica types first (the order the operators start them in).
_FIRST = ("Master", "Chief", "Launcher", "Scheduler", "PS")


def _deriver(field: str):  # type: ignore[no-untyped-def]
    def derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
        specs = (obj.get("spec") or {}).get(field)
        if not isinstance(specs, dict) or not specs:
            raise ManifestError(kind, f"spec.{field}", "required: at least one replica type")
        order = sorted(specs, key=lambda t: (_FIRST.index(t) if t in _FIRST else 99, t))
        sets = []
        for rtype in order:
            where = f"spec.{field}.{rtype}"
            spec = specs[rtype]
            if not isinstance(spec, dict):
                raise ManifestError(kind, where, "expected an object")
            n = replicas(kind, spec.get("replicas"), f"{where}.replicas")
            if n:
                sets.append(pod_set(kind, rtype, n, spec.get("template"), f"{where}.template"))
        return sets
    return derive


def _kubeflow(kind: str, plural: str, field: str, version: str = "v1") -> Kind:
    return Kind(
        api_version=f"kubeflow.org/{version}", kind=kind, plural=plural,
        derive_fn=_deriver(field), suspend_path="spec.runPolicy.suspend",
        state_fn=lambda o: conditions_state(o, success=("Succeeded",), failure=("Failed",)),
        doc=f"A pod set per replica type of spec.{field}.",
    )


PYTORCHJOB = _kubeflow("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs")
TFJOB = _kubeflow("TFJob", "tfjobs", "tfReplicaSpecs")
XGBOOSTJOB = _kubeflow("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs")
JAXJOB = _kubeflow("JAXJob", "jaxjobs", "jaxReplicaSpecs")
PADDLEJOB = _kubeflow("PaddleJob", "paddlejobs", "paddleReplicaSpecs")
MPIJOB = _kubeflow("MPIJob", "mpijobs", "mpiReplicaSpecs", version="v2beta1")
