"""The engine's live state and the scheduling cycle (QUOTA-SEMANTICS.md §4-§7).

`Engine` holds the tree with usage, the fleet with free resources, the pending and admitted
workloads, cooldowns, victims in grace and the repayment history. The workers build one from a
`Snapshot` per cycle (`schedule`); the simulator keeps one alive and feeds it events, so a
cycle costs what changed, not what exists.

Choices where the semantics page is silent (Kueue's behaviour unless said otherwise):
- Candidate order: a workload is "within guarantee" when it is on any of its flavors; the
  borrow score uses its first flavor's GPU key at its leaf.
- Flavors: a workload whose pod sets ask no GPU tries CPU-only flavors before GPU flavors
  ("CPU work on GPU nodes only after the cpu nodes are full").
- Within one cycle usage only grows (victims keep their capacity until their grace ends), so a
  workload identical in queue, shape and options to one that already failed in this cycle fails
  the same way without new checks.
- A starving workload that does not fit holds a reservation on its first usable flavor for the
  rest of the cycle: its demand as phantom usage in the quota tree, and, when its quota fits but
  no nodes do, the nodes that could hold its gang (most free GPUs first) are kept from later
  workloads. Later workloads that would have fit without the hold get NO_CAPACITY naming it.
  It does not hold when a policy-lowered max or its cooldown blocks it (holding would idle the
  flavor and, for a reclaimed borrower, take back what was reclaimed).
- A preemptor whose victims are all gone goes first in the next cycle, before starving work:
  the capacity was freed for it (otherwise reclaim can repeat after every cooldown).
- A preemptor whose victims are still in their grace period does not preempt again; it waits
  (WAITING_FOR_PREEMPTION). Victims in grace are never chosen twice.
- Reclaim victims run on the preemptor's flavor, in another leaf, are preemptible and not in
  grace, and on some contested key their leaf and every ancestor below the lowest common
  ancestor are above min. Priority victims are in the same leaf with a strictly lower priority.
  Reclaim candidates come before priority candidates; the set is filled greedily, then
  minimised by putting back every victim but the last that is not needed (Kueue).
- A victim's reason: reclaim -> QUOTA_BORROW_UNAVAILABLE, priority -> NO_CAPACITY, naming
  the preemptor.
- Disruption budgets count running pods of running workloads not in grace.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Sequence

from scheduling.engine.accounting import EPS, Demand, QuotaTree, fmt
from scheduling.engine.cycle import CycleMixin
from scheduling.engine.placement import Fleet
from scheduling.engine.pool import Pod, Pool
from scheduling.engine.state import (
    RC,
    Admitted,
    Group,
    Pending,
    expand_pods,
    pods_text,
)
from scheduling.engine.types import (
    AdmittedWorkload,
    ClusterSpec,
    CycleResult,
    DisruptionBudget,
    FlavorSpec,
    PodSetSpec,
    QueueSpec,
    Reason,
    Reject,
    RepaymentRecord,
    Settings,
    Snapshot,
    WorkloadSpec,
)


class Engine(CycleMixin):
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
        self.fleet = Fleet(clusters, s.min_cluster_health, s.cpu_per_gpu_reserved)
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
        self.repay: dict[int, deque[tuple[float, bool]]] = {}
        self.repay_forced: dict[int, int] = {}
        for rec in sorted(repayment, key=lambda r: r.ended_at):
            self.record_repayment(rec.queue, rec.ended_at, forced=rec.forced)
        self.claims: set[str] = set()  # preemptors whose victims are all gone
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
        eng.refresh_capacity()
        return eng

    def add_admitted(self, adm: AdmittedWorkload) -> None:
        """Record a workload that already holds capacity (reserved or running)."""
        w = adm.workload
        leaf = self.tree.index[w.queue]
        pods = expand_pods(w)
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
            self.fleet.assign(adm.cluster, adm.flavor, idx, kept_pods)
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

    def _index_admitted(self, a: Admitted) -> None:
        self.admitted[a.name] = a
        if not a.running:
            self.reserved[a.name] = a
        self.by_leaf_flavor.setdefault((a.leaf, a.flavor), {})[a.name] = a

    def _demand(self, flavor: str, pods: Sequence[Pod]) -> Demand:
        g = sum(p[0] for p in pods)
        c = sum(p[1] for p in pods)
        m = sum(p[2] for p in pods)
        return self.tree.demand(flavor, (("gpu", g), ("cpu", c), ("memory", m)))

    def refresh_capacity(self) -> None:
        """Recompute the root capacity (after health or node changes)."""
        used: dict[tuple[str, str], float] = {}
        for a in self.admitted.values():
            c = self.fleet.by_name.get(a.cluster)
            if c is not None and not self.fleet.healthy(c):
                for k, amount in a.demand:
                    key = self.tree.keys[k]
                    used[key] = used.get(key, 0.0) + amount
        cap = self.fleet.capacity(used)
        self.tree.set_capacity(cap)
        self.real.set_capacity(cap)

    # ---- requests --------------------------------------------------------------------

    def check(self, w: WorkloadSpec) -> list[Reason]:
        """Reasons to reject the request at submission (§4.7); empty when it may wait."""
        # What it depends on is fixed for the engine's life (tree, flavors, nodes even when
        # not ready): a request shaped like one that passed passes.
        key = (w.queue, w.pod_sets, w.preemptible, w.topology_same, w.strategy)
        if key in self._checked:
            return []
        found = self._check(w)
        if not found:
            self._checked.add(key)
        return found

    def _check(self, w: WorkloadSpec) -> list[Reason]:
        bad = self._invalid(w)
        if bad:
            return bad
        leaf = self.tree.index[w.queue]
        pods = expand_pods(w)
        found: list[Reason] = []
        for f in w.flavors:
            reasons = self._flavor_static(w, f)
            reasons += self.tree.static_reasons(leaf, self._demand(f, pods),
                                                preemptible=w.preemptible)
            if not any(r.code == RC.FLAVOR_UNAVAILABLE for r in reasons):
                fit = self._fits_empty(f, pods, w.topology_same == "rack")
                if fit is not None:
                    reasons.append(fit)
            if not reasons:
                return []
            found.extend(reasons)
        return found

    def _invalid(self, w: WorkloadSpec) -> list[Reason]:
        out: list[str] = []
        q = self.tree.index.get(w.queue)
        if q is None:
            out.append(f"unknown queue {w.queue!r}")
        elif not self.tree.is_leaf[q]:
            out.append(f"queue {w.queue} is not a leaf; submit to one of its leaves")
        if not w.pod_sets:
            out.append("no pod sets")
        first = w.flavors
        if not first:
            out.append("no flavors listed")
        for i, ps in enumerate(w.pod_sets):
            if ps.count < 1:
                out.append(f"pod set {i}: count {ps.count} < 1")
            for field_name in ("gpus", "cpu", "memory_gib"):
                if getattr(ps, field_name) < 0:
                    out.append(f"pod set {i}: {field_name} {fmt(getattr(ps, field_name))} < 0")
            if ps.flavors != first:
                out.append(f"pod set {i}: flavors {list(ps.flavors)} differ from pod set 0's "
                           f"{list(first)}")
        for f in first:
            if f not in self.known_flavors:
                out.append(f"unknown flavor {f!r}")
        if w.topology_same not in ("", "rack"):
            out.append(f"topology same {w.topology_same!r}: only 'rack' is supported")
        if w.strategy not in ("", "binpack", "spread"):
            out.append(f"strategy {w.strategy!r}: one of binpack, spread")
        return [Reason(RC.INVALID_REQUEST, f"workload {w.display_name or w.name}: {m}")
                for m in out]

    def _flavor_static(self, w: WorkloadSpec, f: str) -> list[Reason]:
        mem = self.flavor_mem.get(f)
        for i, ps in enumerate(w.pod_sets):
            if ps.gpus > 0 and ps.gpu_memory_gib is not None:
                if not self.gpu_flavor.get(f, False):
                    return [Reason(RC.GPU_MEMORY_INSUFFICIENT,
                                   f"flavor {f}: pod set {i} asks {fmt(ps.gpu_memory_gib)} GiB "
                                   f"per GPU; {f} has no GPUs")]
                if mem is not None and ps.gpu_memory_gib > mem + EPS:
                    return [Reason(RC.GPU_MEMORY_INSUFFICIENT,
                                   f"flavor {f}: pod set {i} asks {fmt(ps.gpu_memory_gib)} GiB "
                                   f"per GPU > {fmt(mem)} GiB per card")]
        if f not in self.fleet.flavor_clusters:
            return [Reason(RC.FLAVOR_UNAVAILABLE, f"flavor {f}: no cluster has {f} nodes")]
        return []

    def _fits_empty(self, f: str, pods: list[Pod], same_rack: bool) -> Reason | None:
        """Could one cluster hold the whole gang on flavor f if it were empty?"""
        key = (f, tuple(pods), same_rack)
        if key in self._empty_fit:
            return self._empty_fit[key]
        result: Reason | None = None
        topo = False
        ok = False
        for c in self.fleet.flavor_clusters.get(f, []):
            pool = c.pools[f].empty_copy()
            if same_rack:
                for rack in pool.racks(False):
                    if pool.place(pods, False, self.fleet.reserve, rack) is not None:
                        ok = True
                        break
                if not ok and pool.place(pods, False, self.fleet.reserve, None) is not None:
                    topo = True
            elif pool.place(pods, False, self.fleet.reserve, None) is not None:
                ok = True
            if ok:
                break
        if not ok:
            g = sum(p[0] for p in pods)
            if topo:
                result = Reason(RC.TOPOLOGY_UNSATISFIABLE,
                                f"flavor {f}: {pods_text(len(pods))} ({g} GPUs) fit no single rack "
                                "of any cluster, even empty")
            else:
                result = Reason(RC.NO_CAPACITY,
                                f"flavor {f}: {pods_text(len(pods))} ({g} GPUs) fit no single "
                                "cluster, even empty")
        self._empty_fit[key] = result
        return result

    def submit(self, w: WorkloadSpec) -> None:
        """Add a pending workload (checked by `check` beforehand if the caller wants)."""
        shape = self._shapes.get((w.queue, w.pod_sets))
        if shape is None:
            shape = self._shapes[(w.queue, w.pod_sets)] = self._shape(w)
        p = Pending(w, *shape)
        if not self.parking:
            p.sig = ("", w.name)
        self.pending[w.name] = p
        if p.not_before is not None:
            heapq.heappush(self.backoff, (p.not_before, p.name))
        else:
            self._join(p)

    def _shape(self, w: WorkloadSpec) -> tuple[int, list[Pod], dict[str, Demand], list[str],
                                                Reason | None, int | None]:
        """What a pending workload's queue and pod sets determine (shared by identical
        requests; never modified): leaf, pods, demand per usable flavor, usable flavors in
        the order they are tried, the reason when none is usable, the GPU key of the score."""
        leaf = self.tree.index[w.queue]
        pods = expand_pods(w)
        order = list(w.flavors)
        if all(p[0] == 0 for p in pods):
            order.sort(key=lambda f: self.gpu_flavor.get(f, False))
        usable: list[str] = []
        static: Reason | None = None
        demand: dict[str, Demand] = {}
        for f in order:
            reasons = self._flavor_static(w, f)
            if reasons:
                static = static or reasons[0]
                continue
            usable.append(f)
            demand[f] = self._demand(f, pods)
        gpu_key = self.tree.kidx.get((w.flavors[0], "gpu")) if w.flavors else None
        return leaf, pods, demand, usable, static, gpu_key

    def _join(self, p: Pending) -> None:
        g = self.groups.get(p.sig)
        if g is None:
            g = self.groups[p.sig] = Group(p.sig)
        key = p.order_tail
        members = g.members
        if not members or members[-1].order_tail <= key:
            members.append(p)
        else:
            # Behind the members whose victims are gone: they go first (`_claim`).
            lo = 0
            claims = self.claims
            while lo < len(members) and members[lo].name in claims:
                lo += 1
            members.insert(bisect.bisect_right(members, key, lo=lo,
                                               key=lambda m: m.order_tail), p)
        g.unreported.add(p.name)
        p.group = g

    def _leave(self, p: Pending) -> None:
        g = p.group
        if g is None:
            return
        p.group = None
        g.shifted = True
        try:
            g.members.remove(p)
        except ValueError:
            pass
        g.unreported.discard(p.name)
        if not g.members:
            del self.groups[g.sig]

    def remove_pending(self, name: str) -> None:
        """Drop a pending workload (cancelled); its preemptions, if any, stay in grace."""
        p = self.pending.pop(name, None)
        if p is not None:
            self._leave(p)
        self.waiting.pop(name, None)

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
        """
        a = self.admitted.pop(name, None)
        if a is None:
            return None
        self.reserved.pop(name, None)
        self.by_leaf_flavor[(a.leaf, a.flavor)].pop(name, None)
        if a.grace_until is not None:
            self.in_grace.get(a.flavor, {}).pop(name, None)
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
        if a.borrowed:
            self.record_repayment(a.leaf, now, forced=forced)
        if a.preempted_by:
            victims = self.waiting.get(a.preempted_by)
            if victims is not None:
                victims.discard(name)
                if not victims:
                    del self.waiting[a.preempted_by]
                    self._claim(a.preempted_by)
        c = self.fleet.by_name.get(a.cluster)
        if c is not None and not self.fleet.healthy(c):
            self.refresh_capacity()
        return a

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

    def _claim(self, name: str) -> None:
        """The victims of `name` are gone: it goes first next cycle (the freed capacity was
        taken for it; without this a starving borrower could take it back and the reclaim
        would repeat after every cooldown)."""
        p = self.pending.get(name)
        if p is None:
            return
        self.claims.add(name)
        g = p.group
        if g is not None:
            g.parked = False
            g.shifted = True
            members = g.members
            members.remove(p)
            # In front of the group, among the other preemptors going first in their order.
            i = 0
            while (i < len(members) and members[i].name in self.claims
                   and members[i].order_tail < p.order_tail):
                i += 1
            members.insert(i, p)

    # ---- rejection helper ------------------------------------------------------------

    def reject_if_impossible(self, w: WorkloadSpec, res: CycleResult) -> bool:
        """Check a request; record a Reject in `res` and return True when it can never fit."""
        reasons = self.check(w)
        if reasons:
            res.rejected.append(Reject(w.name, tuple(reasons)))
            return True
        return False


def schedule(snapshot: Snapshot) -> CycleResult:
    """One cycle on a snapshot (the workers' entry point): pure, deterministic."""
    return Engine.from_snapshot(snapshot).cycle(snapshot.now)


def check_request(workload: WorkloadSpec, snapshot: Snapshot) -> list[Reason]:
    """Reasons to reject a request at submission (empty: it may wait). Uses the tree and fleet
    of the snapshot; pending/admitted workloads are not needed."""
    eng = Engine(queues=snapshot.queues, clusters=snapshot.clusters, flavors=snapshot.flavors,
                 settings=snapshot.settings)
    return eng.check(workload)
