"""`batch/v1` Job: one pod set of `parallelism` pods (fewer when `completions` is smaller),
held back by `spec.suspend`; finished by its Complete / Failed conditions."""

from __future__ import annotations

from typing import Any

from scheduling.kinds.base import DerivedPodSet, Kind, conditions_state, get, pod_set, replicas


def job_pods(kind: str, job_spec: Any, path: str) -> int:
    """Pods one Job runs at once: parallelism (default 1), at most its completions."""
    parallelism = replicas(kind, get(job_spec, "parallelism"), f"{path}.parallelism")
    completions = get(job_spec, "completions")
    if completions is not None:
        parallelism = min(parallelism, replicas(kind, completions, f"{path}.completions"))
    return parallelism


def _derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    count = job_pods(kind, obj.get("spec"), "spec")
    if count == 0:
        return []
    return [pod_set(kind, "main", count, get(obj, "spec.template"), "spec.template")]


JOB = Kind(
    api_version="batch/v1", kind="Job", plural="jobs", derive_fn=_derive,
    state_fn=lambda o: conditions_state(o, success=("Complete",), failure=("Failed",)),
    doc="One pod set: parallelism pods (at most completions).",
)
