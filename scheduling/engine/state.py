"""The engine's per-workload records: pending workloads, their groups, admitted ones."""

from __future__ import annotations

import bisect

from scheduling.engine.accounting import INF, Demand, QuotaTree
from scheduling.engine.placement import Fleet
from scheduling.engine.pool import Pod, Pool, pod_of
from scheduling.engine.types import (
    CycleResult,
    DisruptionBudget,
    Nomination,
    PodSetSpec,
    Reason,
    ReasonCode,
    Settings,
    WorkloadSpec,
)

RC = ReasonCode
ADMITTED, PREEMPTING, WAITING, FAILED = range(4)


def backoff_delay(settings: Settings, n: int) -> float:
    """Pods-ready backoff before retry number n (n >= 1): base * 2^(n-1), capped."""
    return float(min(settings.backoff_max_s, settings.backoff_base_s * 2 ** max(0, n - 1)))


def pods_text(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def expand_pods(w: WorkloadSpec) -> list[Pod]:
    pods: list[Pod] = []
    for ps in w.pod_sets:
        pods.extend([pod_of(ps.gpus, ps.cpu, ps.memory_gib, ps.gpu_memory_gib,
                            resources=ps.resources)] * int(ps.count))
    return pods


class Pending:
    """A pending workload with what the cycle needs precomputed."""

    __slots__ = ("spec", "name", "leaf", "pods", "demand", "flavors", "static_reason",
                 "sig", "gpu_key", "order_tail", "not_before", "group", "last_code", "wg",
                 "wg_ver", "cpu_only", "place_key", "flavor_key", "fractional", "may_hold")

    def __init__(self, spec: WorkloadSpec, leaf: int, pods: list[Pod],
                 demand: dict[str, Demand], flavors: list[str], static_reason: Reason | None,
                 gpu_key: int | None) -> None:
        self.spec = spec
        self.name = spec.name
        self.leaf = leaf
        self.pods = pods
        self.cpu_only = all(x[0] == 0 for x in pods)
        self.fractional = any(0 < x[0] < 1 for x in pods)
        self.demand = demand
        self.flavors = flavors
        self.flavor_key = tuple(flavors)
        self.static_reason = static_reason
        self.gpu_key = gpu_key
        self.not_before = spec.not_before
        self.order_tail = (-spec.priority, spec.submitted_at, spec.name)
        self.sig: tuple[object, ...] = (
            leaf, tuple(pods), tuple(flavors), spec.preemptible, spec.can_preempt,
            spec.priority, spec.topology_same, spec.strategy, spec.dataset,
            spec.allowed_clusters, spec.allowed_policy)
        self.group: Group | None = None
        self.last_code = ""
        self.wg = False  # within guarantee, as of usage version wg_ver of its top-level queue
        self.wg_ver = -1
        # What a placement of its pods depends on besides the fleet (`_unheld_place`).
        self.place_key: tuple[object, ...] | None = None
        # Whether it holds its first flavor when starving, as its last turn found
        # (`HoldsMixin._may_hold`; its group's `holds` when it is parked).
        self.may_hold = False


class Group:
    """Pending workloads identical for admission (leaf, pods, flavors, options, priority).

    Within one cycle usage only grows, so when a group's first member fails the rest fail the
    same way: a cycle tries a group's members in order and stops at the first failure. A group
    that failed is parked with what could change that (capacity freed on its flavors, enough
    to cover its quota deficit; admissions that create victims; its cooldown ending) and is
    skipped until then.
    """

    __slots__ = ("sig", "members", "code", "reason", "unreported", "parked", "park",
                 "retry_at", "preempts", "pos", "violating", "holds", "held_by", "shifted",
                 "quiet", "top", "top_seen", "wg_watch", "reclaims")

    def __init__(self, sig: tuple[object, ...]) -> None:
        self.sig = sig
        self.members: list[Pending] = []
        self.code = ""
        self.reason: Reason | None = None
        self.holds = False  # when starving, its last failure holds its first flavor
        self.unreported: set[str] = set()
        self.parked = False
        # Per flavor: (free events seen, freed amounts seen, quota deficit per key).
        self.park: dict[str, tuple[int, dict[int, float], Demand]] = {}
        self.retry_at = INF
        self.preempts: dict[str, int] = {}
        self.reclaims = False  # within its guarantee on some flavor when parked (may reclaim)
        self.pos = 0
        self.violating = False
        self.held_by: tuple[str, ...] = ()  # holders that held it back in its last cycle
        self.shifted = True  # members left or moved since its reasons were last refreshed
        # `changes` of the engine when its wake conditions last did not hold (-1: not since
        # it was parked): until an admission or an end they cannot hold, short of retry_at.
        self.quiet = -1
        # Ends in its top-level queue's subtree when parked (-1: not watched): one may bring
        # it within its guarantee, where it may reclaim.
        self.top = 0
        self.top_seen = -1
        # Or, per such flavor, what its leaf must free first: (key, amount, freed so far).
        self.wg_watch: list[list[tuple[int, float, float]]] = []

    def place(self, p: Pending, claims: set[str]) -> int:
        """Insert p at its place in the order (`order_tail`), behind the members owed the
        first turn (`claims`, at the front); its index."""
        members = self.members
        lo = 0
        while lo < len(members) and members[lo].name in claims:
            lo += 1
        at = bisect.bisect_right(members, p.order_tail, lo=lo, key=lambda m: m.order_tail)
        members.insert(at, p)
        return at


class Admitted:
    """A workload holding capacity, with its nodes as pool indices."""

    __slots__ = ("spec", "name", "leaf", "flavor", "cluster", "nodes", "node_names", "pods",
                 "demand", "borrowed", "admitted_at", "seq", "running", "grace_until",
                 "preempted_by")

    def __init__(self, spec: WorkloadSpec, leaf: int, flavor: str, cluster: str,
                 nodes: list[int], node_names: tuple[str, ...], pods: list[Pod],
                 demand: Demand, borrowed: bool, admitted_at: float, seq: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.leaf = leaf
        self.flavor = flavor
        self.cluster = cluster
        self.nodes = nodes
        self.node_names = node_names
        self.pods = pods
        self.demand = demand
        self.borrowed = borrowed
        self.admitted_at = admitted_at
        self.seq = seq
        self.running = False
        self.grace_until: float | None = None
        self.preempted_by = ""


class EngineBase:
    """The engine's state, declared once for the mixins (`Engine` sets it up)."""

    settings: Settings
    parking: bool
    fleet: Fleet
    tree: QuotaTree
    real: QuotaTree  # `tree` without the holds of this cycle (real usage only)
    weights: tuple[float, float, float, float]
    flavor_mem: dict[str, float | None]  # GPU memory per card, by flavor
    known_flavors: set[str]
    gpu_flavor: dict[str, bool]  # flavor -> its nodes have GPUs
    pending: dict[str, Pending]
    groups: dict[tuple[object, ...], Group]
    backoff: list[tuple[float, str]]
    free_events: dict[str, int]
    freed: dict[int, float]
    admits: dict[str, int]  # borrowing admissions per flavor (new reclaim victims)
    leaf_admits: dict[int, int]  # admissions per leaf (new priority victims)
    all_admits: dict[str, int]  # every admission per flavor
    top_ends: dict[int, int]  # ends per top-level queue (its subtree's usage went down)
    leaf_freed: dict[tuple[int, int], float]  # freed per leaf and key, ever
    full: bool
    admitted: dict[str, Admitted]
    in_grace: dict[str, dict[str, Admitted]]
    reserved: dict[str, Admitted]
    by_leaf_flavor: dict[tuple[int, str], dict[str, Admitted]]
    seq: int
    changes: int  # admissions and ends so far (what a parked group's wake conditions read)
    cooldown: dict[int, float]
    waiting: dict[str, set[str]]
    nominations: dict[str, Nomination]  # pending preemptor -> its nomination
    held: dict[str, list[Admitted]]  # preemptor -> ended victims whose capacity is kept for it
    unreleased: frozenset[str]  # ended workloads whose nodes the cluster has not given back
    _freeing: list[Admitted]  # this cycle: held capacity to free at its end (`_denominate`)
    budgets: list[DisruptionBudget]
    claims: set[str]
    _turned: list[Pending]  # this cycle: claims that had their first turn (`_after_claims`)
    phantom: dict[tuple[int, int], float]  # held (not used) demand per queue and key
    _defer: dict[int, float]  # this cycle: leaf -> its oldest starving borrower's submit time
    _promoted: set[str]  # this cycle: those oldest starving borrowers
    _scores: dict[tuple[int, int | None], tuple[int, float]]  # this cycle: borrow scores
    _unheld_cache: dict[tuple[object, ...], bool | Reason]  # this cycle: `_unheld_place`
    # This cycle: per (number of holds, flavors) the holders' names, joined, and the reason.
    _holders_cache: dict[tuple[int, tuple[str, ...]], tuple[tuple[str, ...], str, Reason | None]]
    _holds: list[tuple[Pending, str, Demand, list[tuple[Pool, int]]]]
    # For the engine's life (what they depend on does not change): "could it ever fit" per
    # flavor, pods and same-rack; requests found valid, by shape; `_shape` per queue and pods.
    _empty_fit: dict[tuple[str, tuple[Pod, ...], bool], Reason | None]
    _checked: set[tuple[object, ...]]
    _shapes: dict[tuple[str, tuple[PodSetSpec, ...]],
                  tuple[int, list[Pod], dict[str, Demand], list[str], Reason | None, int | None]]

    def submit(self, w: WorkloadSpec) -> None:
        raise NotImplementedError

    def end(self, name: str, now: float, *, forced: bool = False) -> Admitted | None:
        raise NotImplementedError

    def repayment(self, leaf: int, now: float) -> float:
        raise NotImplementedError

    def _index_admitted(self, a: Admitted) -> None:
        raise NotImplementedError

    def _join(self, p: Pending) -> None:
        raise NotImplementedError

    def _claim(self, name: str) -> None:
        raise NotImplementedError

    def _demand(self, flavor: str, pods: list[Pod]) -> Demand:
        raise NotImplementedError

    def _free(self, a: Admitted) -> None:
        raise NotImplementedError

    def _denominate(self, name: str, res: CycleResult | None) -> None:
        raise NotImplementedError

    def _free_deferred(self) -> None:
        raise NotImplementedError
