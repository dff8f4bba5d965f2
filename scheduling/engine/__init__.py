"""The scheduling engine: pure Python, no Django, no clock reads, no unseeded randomness.

Frozen dataclasses in (`Snapshot`), decisions out (`CycleResult`). See `types` for the
interface and QUOTA-SEMANTICS.md for the rules.

- `schedule(snapshot) -> CycleResult`: one cycle (the workers' entry point).
- `check_request(workload, snapshot) -> list[Reason]`: reasons to reject at submission.
- `Engine`: the live state the simulator keeps between cycles (`submit`, `end`, `cycle`).
"""

from scheduling.engine.engine import Engine, check_request, schedule
from scheduling.engine.state import backoff_delay
from scheduling.engine.types import (
    DEFAULT_PRIORITY_CLASSES,
    Admit,
    AdmittedWorkload,
    ClusterSpec,
    CycleResult,
    DisruptionBudget,
    FlavorSpec,
    HeldCapacity,
    Key,
    KeyQuota,
    NodeSpec,
    NominatedVictim,
    Nomination,
    PodSetSpec,
    Preempt,
    PreemptionKind,
    PriorityClassSpec,
    QueueSpec,
    Reason,
    ReasonCode,
    Reject,
    Release,
    RepaymentRecord,
    Resources,
    Settings,
    Snapshot,
    WorkloadSpec,
    gpu_equivalent,
    resources_of,
)

__all__ = [
    "DEFAULT_PRIORITY_CLASSES",
    "Admit",
    "AdmittedWorkload",
    "ClusterSpec",
    "CycleResult",
    "DisruptionBudget",
    "Engine",
    "FlavorSpec",
    "HeldCapacity",
    "Key",
    "KeyQuota",
    "NominatedVictim",
    "Nomination",
    "NodeSpec",
    "PodSetSpec",
    "Preempt",
    "PreemptionKind",
    "PriorityClassSpec",
    "QueueSpec",
    "Reason",
    "ReasonCode",
    "Reject",
    "Release",
    "RepaymentRecord",
    "Resources",
    "Settings",
    "Snapshot",
    "WorkloadSpec",
    "backoff_delay",
    "check_request",
    "gpu_equivalent",
    "resources_of",
    "schedule",
]
