"""A recording stand-in for a cluster backend (the in-process cycle and dispatch tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.backends.base import (
    DispatchRefused,
    PodSetStatus,
    RefusalReason,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
)


@dataclass
class FakeBackend:
    """Remembers what was asked; `refuse` makes create_workload refuse; `phase` per workload id
    is one of created/running/succeeded/failed."""

    name: str
    refuse: bool = False
    calls: list[tuple[str, int]] = field(default_factory=list)
    phase: dict[int, str] = field(default_factory=dict)
    specs: dict[int, WorkloadSpec] = field(default_factory=dict)

    def list_nodes(self, flavors=None):
        raise NotImplementedError

    def ensure_namespace(self, namespace):
        return None

    def create_workload(self, spec: WorkloadSpec) -> WorkloadRef:
        self.calls.append(("create", spec.workload_id))
        if self.refuse:
            raise DispatchRefused(RefusalReason.REFUSED, f"{self.name} told to refuse")
        self.specs[spec.workload_id] = spec
        self.phase.setdefault(spec.workload_id, "created")
        return spec.ref

    def start_workload(self, ref: WorkloadRef) -> None:
        self.calls.append(("start", ref.workload_id))

    def suspend_workload(self, ref: WorkloadRef, grace_s: int) -> None:
        self.calls.append(("suspend", ref.workload_id))

    def delete_workload(self, ref: WorkloadRef) -> None:
        self.calls.append(("delete", ref.workload_id))
        self.phase.pop(ref.workload_id, None)

    def workload_status(self, ref: WorkloadRef) -> WorkloadStatus:
        phase = self.phase.get(ref.workload_id)
        sets = []
        for job in ref.job_names:
            if phase is None:
                sets.append(PodSetStatus(job_name=job, exists=False))
                continue
            spec = self.specs[ref.workload_id]
            count = spec.pod_sets[0].count
            sets.append(PodSetStatus(
                job_name=job, exists=True, count=count,
                pending=count if phase == "created" else 0,
                running=count if phase == "running" else 0,
                succeeded=count if phase == "succeeded" else 0,
                failed=count if phase == "failed" else 0, job_failed=phase == "failed",
                message="OOMKilled" if phase == "failed" else ""))
        return WorkloadStatus(ref=ref, pod_sets=tuple(sets))

    def workload_statuses(self, refs):
        return [self.workload_status(ref) for ref in refs]

    def post_event(self, ref, type, reason, message):
        self.calls.append(("event", ref.workload_id))

    def sync_priority_classes(self, classes):
        return None

    def list_workloads(self):
        return []
