"""The engine's inputs and outputs: frozen dataclasses, no Django.

Conventions (the docstrings here are the interface documentation):
- Numbers are plain `float`/`int`. The database side converts `Decimal` with `float()`; the
  engine compares with a tolerance of 1e-9 so fractional CPU sums do not flip a decision.
- Times are seconds on one clock chosen by the caller (the simulator: seconds from the start;
  the workers: POSIX timestamps). The engine never reads a clock: `now` is an argument.
- A queue is named by its path (`rd/vision`), the root is implicit. A quota key is
  `(flavor, resource)`, written `a100-80g/gpu`.
- A workload is named by `name`, unique among the workloads of one snapshot (the database side
  passes `str(pk)` and may keep the human name in `display_name`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, SupportsFloat

Key = tuple[str, str]
# Extended resources (QUOTA-SEMANTICS.md §10) of a node or a pod: (name, amount) pairs sorted by
# name, amounts in Allot's unit (a count; GiB for memory-like names), so specs stay hashable.
Resources = tuple[tuple[str, float], ...]
_MIG = re.compile(r"(?:^|/)mig-(\d+)g\.")


def resources_of(mapping: Mapping[str, SupportsFloat] | None) -> Resources:
    """A mapping of extended resources as the engine's sorted pairs (zero amounts dropped)."""
    return tuple(sorted((str(k), float(v)) for k, v in (mapping or {}).items() if v))


def gpu_equivalent(flavor: FlavorSpec | None, resource: str) -> float:
    """What one unit of `resource` is worth in cards on the flavor: the flavor's
    `gpu_equivalents`, else N/7 for a MIG slice `mig-Ng.*`, else 0 (`gpu` itself: 1)."""
    if resource == "gpu":
        return 1.0
    if flavor is not None and resource in flavor.gpu_equivalents:
        return float(flavor.gpu_equivalents[resource])
    match = _MIG.search(resource)
    return int(match.group(1)) / 7.0 if match else 0.0


class ReasonCode(StrEnum):
    """Machine-readable reason codes (QUOTA-SEMANTICS.md §8)."""

    QUOTA_MAX = "QUOTA_MAX"
    QUOTA_BORROW_UNAVAILABLE = "QUOTA_BORROW_UNAVAILABLE"
    NON_PREEMPTIBLE_BEYOND_MIN = "NON_PREEMPTIBLE_BEYOND_MIN"
    COOLDOWN = "COOLDOWN"
    NO_CAPACITY = "NO_CAPACITY"
    GPU_MEMORY_INSUFFICIENT = "GPU_MEMORY_INSUFFICIENT"
    TOPOLOGY_UNSATISFIABLE = "TOPOLOGY_UNSATISFIABLE"
    FLAVOR_UNAVAILABLE = "FLAVOR_UNAVAILABLE"
    CLUSTER_UNHEALTHY = "CLUSTER_UNHEALTHY"
    POLICY_DENIED = "POLICY_DENIED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    WAITING_FOR_PREEMPTION = "WAITING_FOR_PREEMPTION"
    PODS_READY_TIMEOUT = "PODS_READY_TIMEOUT"
    INVALID_REQUEST = "INVALID_REQUEST"


class PreemptionKind(StrEnum):
    """Why a victim was chosen: reclaim (guarantee before elasticity) or priority (same leaf)."""

    RECLAIM = "reclaim"
    PRIORITY = "priority"


@dataclass(frozen=True)
class Reason:
    """One reason: a code and a human message naming the level and the numbers."""

    code: ReasonCode
    message: str


@dataclass(frozen=True)
class Settings:
    """Engine settings; defaults are those of QUOTA-SEMANTICS.md."""

    reclaim_cooldown_s: float = 120.0
    starvation_s: float = 1800.0
    attainment_weight: float = 1.0
    repayment_weight: float = 0.5
    strategy: str = "binpack"
    cycle_interval_s: float = 10.0
    pods_ready_timeout_s: float = 300.0
    min_cluster_health: float = 0.5
    cpu_per_gpu_reserved: float = 4.0
    repayment_window_s: float = 7 * 86400.0
    termination_grace_s: float = 30.0
    w_fit: float = 1.0
    w_affinity: float = 1.0
    w_health: float = 1.0
    w_cost: float = 1.0
    backoff_base_s: float = 60.0
    backoff_max_s: float = 3600.0


@dataclass(frozen=True)
class FlavorSpec:
    """A class of node; `gpu_memory_gib` None means a CPU-only flavor. `gpu_equivalents`:
    what one unit of an extended resource (a MIG slice) is worth in cards (`gpu_equivalent`)."""

    name: str
    gpu_memory_gib: float | None = None
    gpu_equivalents: Mapping[str, float] = field(default_factory=dict, compare=False,
                                                 hash=False)


@dataclass(frozen=True)
class PriorityClassSpec:
    """A priority class: its value and whether its workloads may preempt in their leaf."""

    name: str
    value: int
    can_preempt: bool = False


DEFAULT_PRIORITY_CLASSES = (
    PriorityClassSpec("inference-high", 10000, True),
    PriorityClassSpec("training", 1000, False),
    PriorityClassSpec("batch-low", 100, False),
)


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name, flavor, allocatable resources, rack (interconnect domain), readiness.
    `resources`: its allocatable extended resources (`resources_of`)."""

    name: str
    flavor: str
    gpus: int = 0
    cpu: float = 0.0
    memory_gib: float = 0.0
    rack: str = ""
    ready: bool = True
    resources: Resources = ()


@dataclass(frozen=True)
class ClusterSpec:
    """A member cluster: health in [0, 1], relative price, cached datasets, nodes in order."""

    name: str
    nodes: tuple[NodeSpec, ...] = ()
    region: str = ""
    health: float = 1.0
    price: float = 1.0
    datasets: frozenset[str] = frozenset()


@dataclass(frozen=True)
class KeyQuota:
    """A queue's resolved quota on one key (defaults already applied, e.g. by tree_rules).

    `max` None means unlimited. `max_policy` names the policy that lowered `max` this cycle
    (a QUOTA_MAX reason then names it, and submission never rejects on a policy-lowered max).
    """

    min: float = 0.0
    max: float | None = None
    lendable: float = 0.0
    max_policy: str | None = None


@dataclass(frozen=True)
class QueueSpec:
    """A queue of the tree: path, parent path (None at the top level), quota per key.

    Keys that the tree accounts but this queue does not list get min 0, lendable 0 and the
    parent's max. `strategy` "" inherits the parent's (then the setting).
    """

    path: str
    parent: str | None = None
    quota: Mapping[Key, KeyQuota] = field(default_factory=dict)
    strategy: str = ""


@dataclass(frozen=True)
class PodSetSpec:
    """`count` identical pods; `flavors` in order of preference (the same in every pod set).

    `gpus` is a whole number of cards, or a fraction 0 < f < 1 (steps of 0.001) of one card;
    `gpu_memory_gib` is then the memory slice it needs on that card (None: f x the card's
    memory), and for whole cards the memory each card must have. `resources`: the extended
    resources each pod asks for (`resources_of`), quota keys too.
    """

    count: int
    flavors: tuple[str, ...]
    gpus: float = 0
    cpu: float = 0.0
    memory_gib: float = 0.0
    gpu_memory_gib: float | None = None
    resources: Resources = ()


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload as the engine sees it (pending or admitted).

    `queue` is a leaf path. `priority` is the value of its class, `can_preempt` that class's
    flag. `allowed_clusters` None means every cluster (placement policies narrow it and name
    themselves in `allowed_policy`). `not_before` is the end of a pods-ready backoff;
    `backoff_count` how many pods-ready timeouts it had. `topology_same` is "" or "rack".
    """

    name: str
    queue: str
    pod_sets: tuple[PodSetSpec, ...]
    submitted_at: float = 0.0
    priority: int = 1000
    priority_class: str = "training"
    can_preempt: bool = False
    preemptible: bool = True
    checkpoint: bool = True
    termination_grace_s: float | None = None
    strategy: str = ""
    dataset: str = ""
    topology_same: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    allowed_clusters: frozenset[str] | None = None
    allowed_policy: str = ""
    not_before: float | None = None
    backoff_count: int = 0
    display_name: str = ""

    @property
    def flavors(self) -> tuple[str, ...]:
        return self.pod_sets[0].flavors if self.pod_sets else ()

    @property
    def pod_count(self) -> int:
        return sum(ps.count for ps in self.pod_sets)


@dataclass(frozen=True)
class AdmittedWorkload:
    """A workload holding capacity: reserved (`running` False) or running.

    `nodes` has one node name per pod, in pod-set order. `admission_seq` orders admissions
    (ties on `admitted_at`). `grace_until` is set while it is a preemption victim in its grace
    period (its capacity still counts as used; it is no longer a victim candidate). `cards`
    (empty, or one per pod) is the card a fractional pod holds on its node (None for others).
    """

    workload: WorkloadSpec
    cluster: str
    flavor: str
    nodes: tuple[str, ...]
    borrowed: bool
    admitted_at: float
    running: bool = True
    admission_seq: int = 0
    grace_until: float | None = None
    preempted_by: str = ""
    cards: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class DisruptionBudget:
    """Like a PodDisruptionBudget: keep `min_available` running pods among selected workloads."""

    selector: Mapping[str, str]
    min_available: int
    name: str = ""


@dataclass(frozen=True)
class RepaymentRecord:
    """The end of one borrowing admission of a queue: returned on time, or forced."""

    queue: str
    ended_at: float
    forced: bool = False


@dataclass(frozen=True)
class HeldCapacity:
    """What a node still gives to a workload that has ended (cancelled, requeued) but whose
    pods the cluster has not confirmed gone: used on the node, counted in no quota."""

    cluster: str
    node: str
    gpus: int = 0  # whole cards
    cpu: float = 0.0
    memory_gib: float = 0.0
    # Each fractional pod's share of a card, its GPU memory slice (GiB; -1: its share of the
    # card's memory) and the card it holds (-1: unknown, the first shared card it fits).
    fractions: tuple[tuple[float, float, int], ...] = ()
    resources: Resources = ()  # extended resources, summed over the node's pods


@dataclass(frozen=True)
class NominatedVictim:
    """One victim of a nomination and the capacity it holds: its leaf, cluster, nodes (one
    name per pod) and pods (GPUs, CPU, memory GiB each, then for a fraction its GPU memory
    slice and card, and for a pod asking extended resources those as (name, amount) pairs),
    so that what it frees can be kept for the preemptor after it has ended."""

    name: str
    queue: str
    cluster: str
    nodes: tuple[str, ...]
    pods: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Nomination:
    """A preemptor's claim on the capacity its victims free (Kubernetes' nominatedNodeName):
    the flavor it preempted on, at what time, and every victim chosen for it. While some
    victims are in their grace, what the others freed stays held for it; once all have ended
    it goes first in the next cycle. It ends when the preemptor is admitted, leaves, or has had
    that turn."""

    flavor: str
    at: float
    victims: tuple[NominatedVictim, ...]


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle needs. `cooldowns` maps leaf path -> end of its reclaim cooldown;
    `waiting` maps a pending workload -> names of its victims still in grace; `held` is node
    capacity that ended workloads have not given back yet, and `unreleased` names those
    workloads; `nominations` maps a pending preemptor -> its nomination (what the last cycles
    reported)."""

    now: float
    queues: tuple[QueueSpec, ...]
    clusters: tuple[ClusterSpec, ...]
    flavors: tuple[FlavorSpec, ...] = ()
    pending: tuple[WorkloadSpec, ...] = ()
    admitted: tuple[AdmittedWorkload, ...] = ()
    settings: Settings = field(default_factory=Settings)
    disruption_budgets: tuple[DisruptionBudget, ...] = ()
    repayment: tuple[RepaymentRecord, ...] = ()
    cooldowns: Mapping[str, float] = field(default_factory=dict)
    waiting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    held: tuple[HeldCapacity, ...] = ()
    nominations: Mapping[str, Nomination] = field(default_factory=dict)
    unreleased: frozenset[str] = frozenset()


# ---- decisions --------------------------------------------------------------------------


@dataclass(frozen=True)
class Admit:
    """Reserve capacity for a workload (phase one of dispatch; the caller confirms or refuses)."""

    workload: str
    cluster: str
    flavor: str
    nodes: tuple[str, ...]
    borrowed: bool
    gpus: float = 0
    cpu: float = 0.0
    memory_gib: float = 0.0
    cards: tuple[int | None, ...] = ()  # per pod when some pod is a fraction (else empty)


@dataclass(frozen=True)
class Preempt:
    """Preempt `workload` for `by`; its capacity stays used until `grace_until`."""

    workload: str
    by: str
    kind: PreemptionKind
    grace_until: float
    reason: Reason


@dataclass(frozen=True)
class Reject:
    """A request that can never fit: reject it (not left pending)."""

    workload: str
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class Release:
    """Release a reservation (pods-ready timeout): back to pending until `not_before`."""

    workload: str
    reason: Reason
    not_before: float
    backoff_count: int


@dataclass
class CycleResult:
    """What one cycle decided. `reasons` holds one reason per workload left waiting;
    `nominations` the nominations that began (a preemption) or ended (None) in it, per
    preemptor; `guarantee_blocked` the leaves whose guarantee borrowed work blocks after it
    (`Engine.violating_leaves`, filled by `schedule`)."""

    now: float
    admitted: list[Admit] = field(default_factory=list)
    preempted: list[Preempt] = field(default_factory=list)
    rejected: list[Reject] = field(default_factory=list)
    released: list[Release] = field(default_factory=list)
    reasons: dict[str, Reason] = field(default_factory=dict)
    cooldowns: dict[str, float] = field(default_factory=dict)
    nominations: dict[str, Nomination | None] = field(default_factory=dict)
    guarantee_blocked: list[str] = field(default_factory=list)
