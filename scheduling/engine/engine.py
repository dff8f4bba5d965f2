"""The engine's live state (QUOTA-SEMANTICS.md §4-§7) and its entry points.

`Engine` holds the tree with usage, the fleet with free resources, the pending and admitted
workloads, cooldowns, victims in grace and the repayment history. The workers build one from a
`Snapshot` per cycle (`schedule`); the simulator keeps one alive and feeds it events, so a
cycle costs what changed, not what exists.

Its parts are mixins over `state.EngineBase`; each module's docstring lists the choices it makes
where the semantics page is silent (Kueue's behaviour unless said otherwise):
- `submission`: checks at submission, what a request determines, groups of identical workloads;
- `cycle`: one admission cycle, walking the order of `ordering`; `admission` tries one workload,
  `holds` keeps capacity for starving ones, `parking` sets failed groups aside, `preemption`
  chooses victims;
- this module: building from a snapshot, what ends (finished, cancelled, grace over), fleet
  changes, the repayment history (§6).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import chain

from scheduling.engine.accounting import Demand, QuotaTree
from scheduling.engine.cycle import CycleMixin
from scheduling.engine.placement import Fleet
from scheduling.engine.pool import Pod, Pool, ext_of, pod_of, with_cards
from scheduling.engine.state import (
    Admitted,
    Group,
    Pending,
    expand_pods,
)
from scheduling.engine.submission import SubmissionMixin
from scheduling.engine.types import (
    AdmittedWorkload,
    ClusterSpec,
    CycleResult,
    DisruptionBudget,
    FlavorSpec,
    HeldCapacity,
    Nomination,
    PodSetSpec,
    QueueSpec,
    Reason,
    RepaymentRecord,
    Settings,
    Snapshot,
    WorkloadSpec,
)


class Engine(SubmissionMixin, CycleMixin):
    """Live scheduling state; `cycle(now)` runs one admission cycle and returns decisions."""

    def __init__(self, *, queues: Sequence[QueueSpec], clusters: Sequence[ClusterSpec],
                 flavors: Sequence[FlavorSpec] = (), settings: Settings | None = None,
                 budgets: Sequence[DisruptionBudget] = (),
                 repayment: Iterable[RepaymentRecord] = (), parking: bool = True) -> None:
        """`parking` False evaluates every pending workload on its own in every cycle (no
        groups of identical workloads, nothing parked): the reference the tests compare the
        parked engine with; the decisions are the same, only slower."""
        s = self.settings = settings or Settings()
        self.parking = parking
        # As given: what `export.snapshot_of` writes back (with the fleet's current state).
        self.specs = (tuple(queues), tuple(clusters), tuple(flavors))
        self.fleet = Fleet(clusters, s.min_cluster_health, s.cpu_per_gpu_reserved,
                           {f.name: f.gpu_memory_gib for f in flavors})
        self.tree = QuotaTree(queues)
        # The same tree with real usage only (admissions and ends; no starving workload's
        # hold): what the reasons and wake conditions of a failure are computed on, without
        # lifting the holds from `tree` and putting them back for each failure.
        self.real = QuotaTree(queues)
        self.flavor_mem: dict[str, float | None] = {f.name: f.gpu_memory_gib for f in flavors}
        self.known_flavors = set(self.flavor_mem) | set(self.fleet.flavor_clusters)
        self.gpu_flavor = {
            f: any(g > 0 for c in cs for g in c.pools[f].gpus)
            for f, cs in self.fleet.flavor_clusters.items()
        }
        for f, mem in self.flavor_mem.items():
            self.gpu_flavor.setdefault(f, mem is not None)
        self.weights = (s.w_fit, s.w_affinity, s.w_health, s.w_cost)
        self.pending: dict[str, Pending] = {}
        self.groups: dict[tuple[object, ...], Group] = {}
        self.backoff: list[tuple[float, str]] = []
        self.free_events: dict[str, int] = {}
        self.freed: dict[int, float] = {}
        self.admits: dict[str, int] = {}
        self.leaf_admits: dict[int, int] = {}
        self.all_admits: dict[str, int] = {}
        self.top_ends: dict[int, int] = {}
        self.leaf_freed: dict[tuple[int, int], float] = {}
        self.full = True
        self.admitted: dict[str, Admitted] = {}
        self.in_grace: dict[str, dict[str, Admitted]] = {}  # flavor -> victims in grace
        self.reserved: dict[str, Admitted] = {}  # admitted, pods not all running yet
        self.by_leaf_flavor: dict[tuple[int, str], dict[str, Admitted]] = {}
        self.seq = 0
        self.changes = 0
        self.cooldown: dict[int, float] = {}
        self.waiting: dict[str, set[str]] = {}
        self.nominations: dict[str, Nomination] = {}
        self.held: dict[str, list[Admitted]] = {}
        self.unreleased: frozenset[str] = frozenset()
        self._freeing: list[Admitted] = []
        self.repay: dict[int, deque[tuple[float, bool]]] = {}
        self.repay_forced: dict[int, int] = {}
        for rec in sorted(repayment, key=lambda r: r.ended_at):
            self.record_repayment(rec.queue, rec.ended_at, forced=rec.forced)
        self.claims: set[str] = set()  # preemptors whose victims are all gone
        self._turned: list[Pending] = []
        self.phantom: dict[tuple[int, int], float] = {}
        self._defer: dict[int, float] = {}
        self._promoted: set[str] = set()
        self._scores: dict[tuple[int, int | None], tuple[int, float]] = {}
        self._unheld_cache: dict[tuple[object, ...], bool | Reason] = {}
        self._holders_cache: dict[tuple[int, tuple[str, ...]],
                                  tuple[tuple[str, ...], str, Reason | None]] = {}
        self._holds: list[tuple[Pending, str, Demand, list[tuple[Pool, int]]]] = []
        self.budgets = list(budgets)
        self._empty_fit: dict[tuple[str, tuple[Pod, ...], bool], Reason | None] = {}
        self._checked: set[tuple[object, ...]] = set()  # requests found valid, by shape
        self._shapes: dict[tuple[str, tuple[PodSetSpec, ...]],
                           tuple[int, list[Pod], dict[str, Demand], list[str], Reason | None,
                                 int | None]] = {}
        self.refresh_capacity()

    # ---- building from a snapshot ----------------------------------------------------

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> Engine:
        """An engine holding the snapshot's tree, fleet, admitted and pending workloads."""
        eng = cls(queues=snap.queues, clusters=snap.clusters, flavors=snap.flavors,
                  settings=snap.settings, budgets=snap.disruption_budgets,
                  repayment=snap.repayment)
        for adm in sorted(snap.admitted, key=lambda a: (a.admission_seq, a.admitted_at)):
            eng.add_admitted(adm)
        for held in snap.held:
            eng.add_held(held)
        eng.unreleased = snap.unreleased
        for w in snap.pending:
            eng.submit(w)
        for path, until in snap.cooldowns.items():
            q = eng.tree.index.get(path)
            if q is not None:
                eng.cooldown[q] = until
        for name, victims in snap.waiting.items():
            live = {v for v in victims if v in eng.admitted}
            if live:
                eng.waiting[name] = live
        for name, nom in snap.nominations.items():
            eng.renominate(name, nom)
        eng.refresh_capacity()
        return eng

    def add_admitted(self, adm: AdmittedWorkload) -> None:
        """Record a workload that already holds capacity (reserved or running)."""
        w = adm.workload
        leaf = self.tree.index[w.queue]
        pods = with_cards(expand_pods(w), adm.cards)
        self.record_mix(w)
        idx: list[int] = []
        kept_pods: list[Pod] = []
        cluster = self.fleet.by_name.get(adm.cluster)
        for name, pod in zip(adm.nodes, pods, strict=False):
            loc = self.fleet.node_loc.get(name)
            if loc is None or loc[0] != adm.cluster or loc[1] != adm.flavor:
                continue  # the node is gone: its quota still counts, the node cannot
            idx.append(loc[2])
            kept_pods.append(pod)
        if cluster is not None and idx:
            kept_pods = self.fleet.assign(adm.cluster, adm.flavor, idx, kept_pods)
        demand = self._demand(adm.flavor, pods)
        self.tree.add(leaf, demand)
        self.real.add(leaf, demand)
        self.seq = max(self.seq, adm.admission_seq)
        a = Admitted(w, leaf, adm.flavor, adm.cluster, idx, tuple(adm.nodes), kept_pods, demand,
                     adm.borrowed, adm.admitted_at, adm.admission_seq)
        a.running = adm.running
        a.grace_until = adm.grace_until
        if a.grace_until is not None:
            self.in_grace.setdefault(a.flavor, {})[a.name] = a
        a.preempted_by = adm.preempted_by
        self._index_admitted(a)

    def add_held(self, held: HeldCapacity) -> None:
        """Take node capacity an ended workload has not given back yet (no quota counts it).

        Only what is free on the node is taken: a node already full (its workloads and the
        held capacity together beyond it) stays full, never below empty.
        """
        loc = self.fleet.node_loc.get(held.node)
        if loc is None or loc[0] != held.cluster:
            return  # the node is gone
        pool = self.fleet.by_name[held.cluster].pools[loc[1]]
        i = loc[2]
        ext = tuple((r, min(a, max(0.0, pool.ext[r][i]))) for r, a in held.resources
                    if r in pool.ext)
        pod = pod_of(max(0, min(int(held.gpus), pool.fg[i])), max(0.0, min(held.cpu, pool.fc[i])),
                     max(0.0, min(held.memory_gib, pool.fm[i])),
                     resources=tuple((r, a) for r, a in ext if a > 0))
        self.fleet.assign(held.cluster, loc[1], [i], [pod])
        pool.held += pod[0]
        for r, a in ext_of(pod):
            pool.held_ext[r] = pool.held_ext.get(r, 0.0) + a
        # A fraction holds its share (and memory slice) of its card: the card stays shared,
        # closed to whole-card pods, with only the rest for other fractions.
        for share, gmem, card in held.fractions:
            frac = pod_of(share, 0.0, 0.0, None if gmem < 0 else gmem, card)
            if pool.fraction_fits(i, frac):
                self.fleet.assign(held.cluster, loc[1], [i], [frac])
                pool.held += share

    def _index_admitted(self, a: Admitted) -> None:
        self.admitted[a.name] = a
        if not a.running:
            self.reserved[a.name] = a
        self.by_leaf_flavor.setdefault((a.leaf, a.flavor), {})[a.name] = a

    def refresh_capacity(self) -> None:
        """Recompute the root capacity (after health or node changes)."""
        used: dict[tuple[str, str], float] = {}
        for a in chain(self.admitted.values(), *self.held.values()):
            c = self.fleet.by_name.get(a.cluster)
            if c is not None and not self.fleet.healthy(c):
                for k, amount in a.demand:
                    key = self.tree.keys[k]
                    used[key] = used.get(key, 0.0) + amount
        cap = self.fleet.capacity(used)
        self.tree.set_capacity(cap)
        self.real.set_capacity(cap)

    # ---- what ends -------------------------------------------------------------------

    def mark_running(self, name: str) -> None:
        """All pods of an admitted workload run (phase two confirmed)."""
        a = self.admitted.get(name)
        if a is not None:
            a.running = True
            self.reserved.pop(name, None)

    def end(self, name: str, now: float, *, forced: bool = False) -> Admitted | None:
        """Free an admitted workload's capacity (finished, cancelled, refused, grace over).

        A borrowing admission adds to its queue's repayment history: returned, or `forced`.
        A victim whose preemptor still waits for other victims keeps its capacity, held for
        the preemptor (`nomination`); the last one frees them all and the preemptor goes first.
        """
        a = self.admitted.pop(name, None)
        if a is None:
            return None
        self.reserved.pop(name, None)
        self.by_leaf_flavor[(a.leaf, a.flavor)].pop(name, None)
        if a.grace_until is not None:
            self.in_grace.get(a.flavor, {}).pop(name, None)
        if a.borrowed:
            self.record_repayment(a.leaf, now, forced=forced)
        by = a.preempted_by
        if by and self._hand_over(a):
            return a
        self._free(a)
        if by:
            victims = self.waiting.get(by)
            if victims is not None:
                victims.discard(name)
                if not victims:
                    del self.waiting[by]
                    for h in self.held.pop(by, ()):
                        self._free(h)
                    self._claim(by)
        return a

    def _free(self, a: Admitted) -> None:
        """Give an ended workload's capacity back: quota, nodes, and what parked groups
        watch."""
        self.tree.add(a.leaf, a.demand, -1.0)
        self.real.add(a.leaf, a.demand, -1.0)
        self.changes += 1
        top = self.tree.chain[a.leaf][0]
        self.top_ends[top] = self.top_ends.get(top, 0) + 1
        leaf_freed = self.leaf_freed
        for k, amount in a.demand:
            leaf_freed[(a.leaf, k)] = leaf_freed.get((a.leaf, k), 0.0) + amount
        self.free_events[a.flavor] = self.free_events.get(a.flavor, 0) + 1
        for k, amount in a.demand:
            self.freed[k] = self.freed.get(k, 0.0) + amount
        if a.cluster in self.fleet.by_name and a.nodes:
            self.fleet.unassign(a.cluster, a.flavor, a.nodes, a.pods)
        c = self.fleet.by_name.get(a.cluster)
        if c is not None and not self.fleet.healthy(c):
            self.refresh_capacity()

    def set_health(self, cluster: str, health: float) -> None:
        """Change a cluster's health (every pending group is re-examined next cycle)."""
        self.fleet.by_name[cluster].health = health
        self.refresh_capacity()
        self.full = True

    def set_node_ready(self, node: str, ready: bool) -> list[str]:
        """Mark a node (not) ready; returns the admitted workloads with pods on it."""
        cname, flavor, i = self.fleet.node_loc[node]
        c = self.fleet.by_name[cname]
        c.pools[flavor].set_ready(i, ready)
        c.recount()
        self.refresh_capacity()
        self.full = True
        return sorted(a.name for a in self.admitted.values()
                      if a.cluster == cname and a.flavor == flavor and i in a.nodes)

    def repayment(self, leaf: int, now: float) -> float:
        """returned / (returned + forced) over the window; 1.0 with no history (§6)."""
        hist = self.repay.get(leaf)
        if not hist:
            return 1.0
        start = now - self.settings.repayment_window_s
        while hist and hist[0][0] < start:
            if hist.popleft()[1]:
                self.repay_forced[leaf] -= 1
        if not hist:
            return 1.0
        return (len(hist) - self.repay_forced.get(leaf, 0)) / len(hist)

    def record_repayment(self, queue: str | int, at: float, *, forced: bool) -> None:
        """One borrowing admission of `queue` ended: returned on time, or `forced` (§6)."""
        q = queue if isinstance(queue, int) else self.tree.index.get(queue)
        if q is None:
            return
        self.repay.setdefault(q, deque()).append((at, forced))
        if forced:
            self.repay_forced[q] = self.repay_forced.get(q, 0) + 1


def schedule(snapshot: Snapshot) -> CycleResult:
    """One cycle on a snapshot (the workers' entry point): pure, deterministic."""
    eng = Engine.from_snapshot(snapshot)
    result = eng.cycle(snapshot.now)
    result.guarantee_blocked = sorted(eng.violating_leaves())
    return result


def check_request(workload: WorkloadSpec, snapshot: Snapshot) -> list[Reason]:
    """Reasons to reject a request at submission (empty: it may wait). Uses the tree and fleet
    of the snapshot; pending/admitted workloads are not needed."""
    eng = Engine(queues=snapshot.queues, clusters=snapshot.clusters, flavors=snapshot.flavors,
                 settings=snapshot.settings)
    return eng.check(workload)
