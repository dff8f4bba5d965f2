"""The scheduling engine: pure Python, no Django, no clock reads, no unseeded randomness.

Frozen dataclasses in (`Snapshot`), decisions out (`CycleResult`). See `types` for the
interface and QUOTA-SEMANTICS.md for the rules.
"""

from scheduling.engine.types import (
    DEFAULT_PRIORITY_CLASSES,
    Admit,
    AdmittedWorkload,
    ClusterSpec,
    CycleResult,
    DisruptionBudget,
    FlavorSpec,
    Key,
    KeyQuota,
    NodeSpec,
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
    Settings,
    Snapshot,
    WorkloadSpec,
)

__all__ = [
    "DEFAULT_PRIORITY_CLASSES",
    "Admit",
    "AdmittedWorkload",
    "ClusterSpec",
    "CycleResult",
    "DisruptionBudget",
    "FlavorSpec",
    "Key",
    "KeyQuota",
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
    "Settings",
    "Snapshot",
    "WorkloadSpec",
]
