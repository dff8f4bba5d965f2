"""`batch.volcano.sh/v1alpha1` Job: a pod set per task (`replicas` pods); `minAvailable`
(default: every pod) is the gang Volcano's scheduler starts together, so it may not exceed
the pods. Allot counts every pod. It has no suspend field: its pods are gated until
admitted. Finished by `status.state.phase` (Completed; Failed, Aborted or Terminated)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.kinds.base import (
    DerivedPodSet,
    Kind,
    ManifestError,
    RunState,
    get,
    pod_set,
    replicas,
)


def _derive(kind: str, obj: dict[str, Any]) -> list[DerivedPodSet]:
    tasks = get(obj, "spec.tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ManifestError(kind, "spec.tasks", "required: at least one task")
    sets = []
    for i, task in enumerate(tasks):
        where = f"spec.tasks[{i}]"
        if not isinstance(task, dict):
            raise ManifestError(kind, where, "expected an object")
        n = replicas(kind, task.get("replicas"), f"{where}.replicas")
        if n:
            sets.append(pod_set(kind, str(task.get("name") or i), n, task.get("template"),
                                f"{where}.template"))
    total = sum(s.count for s in sets)
    gang = replicas(kind, get(obj, "spec.minAvailable"), "spec.minAvailable", default=total)
    if gang > total:
        raise ManifestError(kind, "spec.minAvailable",
                            f"{gang} > {total} pods: the gang cannot be larger than the job")
    return sets


def _state(obj: Mapping[str, Any]) -> RunState:
    phase = get(obj, "status.state.phase")
    message = str(get(obj, "status.state.message") or "")
    if phase in ("Failed", "Aborted", "Terminated"):
        return RunState(failed=True, message=f"{phase}: {message}".strip(": "))
    if phase == "Completed":
        return RunState(succeeded=True, message=message)
    return RunState()


VOLCANO_JOB = Kind(
    api_version="batch.volcano.sh/v1alpha1", kind="Job", plural="jobs", derive_fn=_derive,
    suspend_path="", state_fn=_state,
    doc="A pod set per task; minAvailable is the gang; pods gated until admitted.",
)
