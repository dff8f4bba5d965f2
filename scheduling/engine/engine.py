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
from dataclasses import replace

from scheduling.engine.accounting import EPS, INF, Demand, QuotaTree, fmt, key_name
from scheduling.engine.placement import Fleet, Pod, Pool
from scheduling.engine.types import (
    Admit,
    AdmittedWorkload,
    ClusterSpec,
    CycleResult,
    DisruptionBudget,
    FlavorSpec,
    Preempt,
    PreemptionKind,
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

RC = ReasonCode
ADMITTED, PREEMPTING, WAITING, FAILED = range(4)


def backoff_delay(settings: Settings, n: int) -> float:
    """Pods-ready backoff before retry number n (n >= 1): base * 2^(n-1), capped."""
    return float(min(settings.backoff_max_s, settings.backoff_base_s * 2 ** max(0, n - 1)))


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def _expand_pods(w: WorkloadSpec) -> list[Pod]:
    pods: list[Pod] = []
    for ps in w.pod_sets:
        pods.extend([(int(ps.gpus), float(ps.cpu), float(ps.memory_gib))] * int(ps.count))
    return pods


class Pending:
    """A pending workload with what the cycle needs precomputed."""

    __slots__ = ("spec", "name", "leaf", "pods", "demand", "flavors", "static_reason",
                 "sig", "gpu_key", "order_tail", "not_before", "group")

    def __init__(self, spec: WorkloadSpec, leaf: int, pods: list[Pod],
                 demand: dict[str, Demand], flavors: list[str], static_reason: Reason | None,
                 gpu_key: int | None) -> None:
        self.spec = spec
        self.name = spec.name
        self.leaf = leaf
        self.pods = pods
        self.demand = demand
        self.flavors = flavors
        self.static_reason = static_reason
        self.gpu_key = gpu_key
        self.not_before = spec.not_before
        self.order_tail = (-spec.priority, spec.submitted_at, spec.name)
        self.sig = (leaf, tuple(pods), tuple(flavors), spec.preemptible, spec.can_preempt,
                    spec.priority, spec.topology_same, spec.strategy, spec.dataset,
                    spec.allowed_clusters, spec.allowed_policy)
        self.group: Group | None = None


class Group:
    """Pending workloads identical for admission (leaf, pods, flavors, options, priority).

    Within one cycle usage only grows, so when a group's first member fails the rest fail the
    same way: a cycle tries a group's members in order and stops at the first failure. A group
    that failed is parked with what could change that (capacity freed on its flavors, enough
    to cover its quota deficit; admissions that create victims; its cooldown ending) and is
    skipped until then.
    """

    __slots__ = ("sig", "members", "code", "reason", "unreported", "parked", "park",
                 "retry_at", "preempts", "pos", "violating", "holds")

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
        self.pos = 0
        self.violating = False


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


class Engine:
    """Live scheduling state; `cycle(now)` runs one admission cycle and returns decisions."""

    def __init__(self, *, queues: Sequence[QueueSpec], clusters: Sequence[ClusterSpec],
                 flavors: Sequence[FlavorSpec] = (), settings: Settings | None = None,
                 budgets: Sequence[DisruptionBudget] = (),
                 repayment: Iterable[RepaymentRecord] = ()) -> None:
        s = self.settings = settings or Settings()
        self.fleet = Fleet(clusters, s.min_cluster_health, s.cpu_per_gpu_reserved)
        self.tree = QuotaTree(queues)
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
        self.full = True
        self.admitted: dict[str, Admitted] = {}
        self.in_grace: dict[str, dict[str, Admitted]] = {}  # flavor -> victims in grace
        self.reserved: dict[str, Admitted] = {}  # admitted, pods not all running yet
        self.by_leaf_flavor: dict[tuple[int, str], dict[str, Admitted]] = {}
        self.seq = 0
        self.cooldown: dict[int, float] = {}
        self.waiting: dict[str, set[str]] = {}
        self.repay: dict[int, deque[tuple[float, bool]]] = {}
        self.repay_forced: dict[int, int] = {}
        for rec in sorted(repayment, key=lambda r: r.ended_at):
            self.record_repayment(rec.queue, rec.ended_at, forced=rec.forced)
        self.claims: set[str] = set()  # preemptors whose victims are all gone
        self._holds: list[tuple[Pending, str, Demand, list[tuple[Pool, int]]]] = []
        self.budgets = list(budgets)
        self._empty_fit: dict[tuple[str, tuple[Pod, ...], bool], Reason | None] = {}
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
        pods = _expand_pods(w)
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
        self.tree.set_capacity(self.fleet.capacity(used))

    # ---- requests --------------------------------------------------------------------

    def check(self, w: WorkloadSpec) -> list[Reason]:
        """Reasons to reject the request at submission (§4.7); empty when it may wait."""
        bad = self._invalid(w)
        if bad:
            return bad
        leaf = self.tree.index[w.queue]
        pods = _expand_pods(w)
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
                                f"flavor {f}: {_pods(len(pods))} ({g} GPUs) fit no single rack "
                                "of any cluster, even empty")
            else:
                result = Reason(RC.NO_CAPACITY,
                                f"flavor {f}: {_pods(len(pods))} ({g} GPUs) fit no single "
                                "cluster, even empty")
        self._empty_fit[key] = result
        return result

    def submit(self, w: WorkloadSpec) -> None:
        """Add a pending workload (checked by `check` beforehand if the caller wants)."""
        leaf = self.tree.index[w.queue]
        pods = _expand_pods(w)
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
        p = Pending(w, leaf, pods, demand, usable, static, gpu_key)
        self.pending[w.name] = p
        if p.not_before is not None:
            heapq.heappush(self.backoff, (p.not_before, p.name))
        else:
            self._join(p)

    def _join(self, p: Pending) -> None:
        g = self.groups.get(p.sig)
        if g is None:
            g = self.groups[p.sig] = Group(p.sig)
        key = p.order_tail
        members = g.members
        if not members or members[-1].order_tail <= key:
            members.append(p)
        else:
            members.insert(bisect.bisect_right([m.order_tail for m in members], key), p)
        g.unreported.add(p.name)
        p.group = g

    def _leave(self, p: Pending) -> None:
        g = p.group
        if g is None:
            return
        p.group = None
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
            if g.members[0] is not p:
                g.members.remove(p)
                g.members.insert(0, p)

    # ---- the cycle -------------------------------------------------------------------

    def cycle(self, now: float) -> CycleResult:
        """One admission cycle at time `now` (§4): timeouts, order, admit, preempt, reasons."""
        s = self.settings
        res = CycleResult(now=now)
        if s.pods_ready_timeout_s > 0:
            late = [a for a in self.reserved.values()
                    if a.grace_until is None
                    and now - a.admitted_at >= s.pods_ready_timeout_s - EPS]
            for a in late:
                self._timeout(a, now, res)
        while self.backoff and self.backoff[0][0] <= now + EPS:
            _, name = heapq.heappop(self.backoff)
            p = self.pending.get(name)
            if p is not None and p.group is None:
                p.not_before = None
                self._join(p)
        cutoff = now - s.starvation_s
        full = self.full
        self.full = False
        repay_cache: dict[int, float] = {}
        heap: list[tuple[tuple[object, ...], int, Group]] = []
        base: dict[int, tuple[int, float]] = {}
        hold_only: set[int] = set()
        for g in self.groups.values():
            if g.parked and not full and not self._wakes(g, now):
                if g.unreported and g.reason is not None:
                    for name in list(g.unreported):
                        if name not in self.waiting:
                            res.reasons[name] = g.reason
                            g.unreported.discard(name)
                head = g.members[0]
                if g.holds and head.spec.submitted_at < cutoff:
                    # Still cannot fit, still starving: it keeps holding its flavor.
                    hold_only.add(id(g))
                    heap.append(((0, head.spec.submitted_at, 0, 0.0, head.order_tail), id(g),
                                 g))
                continue
            g.parked = False
            g.pos = 0
            p = g.members[0]
            rank = self._rank(p, now, repay_cache)
            base[id(g)] = rank
            heap.append((self._order_key(p, rank, cutoff), id(g), g))
        heapq.heapify(heap)
        held: dict[str, str] = {}
        while heap:
            key, gid, g = heapq.heappop(heap)
            if gid in hold_only:
                head = g.members[0]
                if head.flavors and head.flavors[0] not in held:
                    held[head.flavors[0]] = head.name
                    self._hold(head, head.flavors[0])
                continue
            p = g.members[g.pos]
            if key[0] == 1 and key[2] == 0:
                rank = self._rank(p, now, repay_cache)
                if rank[0] == 1:
                    # Earlier admissions of this cycle used its guarantee: it would borrow now,
                    # so it goes behind the within-guarantee work (Kueue re-checks the mode).
                    base[gid] = rank
                    heapq.heappush(heap, (self._order_key(p, rank, cutoff), gid, g))
                    continue
            outcome, reason, per_flavor = self._consider(p, now, key[0] == 0, res, held)
            if outcome == ADMITTED:
                g.members.pop(g.pos)
                g.unreported.discard(p.name)
                p.group = None
            elif outcome == FAILED:
                assert reason is not None
                self._fail(g, reason, per_flavor, now, res, held)
                continue
            else:
                g.unreported.add(p.name)
                g.pos += 1
            if g.pos < len(g.members):
                heapq.heappush(heap, (self._order_key(g.members[g.pos], base[gid], cutoff),
                                      gid, g))
            elif not g.members:
                del self.groups[g.sig]
        self._release_holds()
        return res

    def _hold(self, p: Pending, f: str) -> None:
        """A starving workload that does not fit holds what it needs on flavor f for the rest
        of the cycle (§4.3): its demand is reserved in the quota tree (a phantom admission),
        and when its quota fits but no nodes do, the nodes with the most free GPUs that could
        hold its gang are kept from later workloads, so they drain towards it."""
        d = p.demand[f]
        quota_ok = self.tree.fits(p.leaf, d)
        self.tree.add(p.leaf, d)
        masked: list[tuple[Pool, int]] = []
        need = sum(x[0] for x in p.pods)
        found = self.fleet.flavor_problem(f, p.spec.allowed_clusters)
        if quota_ok and need and found is None:
            clusters = [c for c in self.fleet.flavor_clusters.get(f, [])
                        if self.fleet.healthy(c) and (p.spec.allowed_clusters is None
                                                      or c.name in p.spec.allowed_clusters)]
            best = max(clusters, key=lambda c: (sum(g for g, r in zip(
                c.pools[f].gpus, c.pools[f].ready, strict=True) if r), c.pools[f].free_gpus(),
                c.name), default=None)
            if best is not None:
                pool = best.pools[f]
                order = sorted((i for i in range(len(pool.names)) if pool.ready[i]),
                               key=lambda i: (-pool.fg[i], i))
                room = 0
                for i in order:
                    if room >= need:
                        break
                    pool.set_ready(i, False)
                    masked.append((pool, i))
                    room += pool.gpus[i]
        self._holds.append((p, f, d, masked))

    def _release_holds(self) -> None:
        """End of cycle: give back held quota and nodes (counted as freed, so parked groups
        may look again)."""
        for p, f, d, masked in reversed(self._holds):
            self.tree.add(p.leaf, d, -1.0)
            for pool, i in masked:
                pool.set_ready(i, True)
            self.free_events[f] = self.free_events.get(f, 0) + 1
            for k, amount in d:
                self.freed[k] = self.freed.get(k, 0.0) + amount
        self._holds.clear()

    def _fits_unheld(self, p: Pending, now: float) -> bool:
        """Would p fit on some flavor if no starving workload held anything?"""
        holds = list(self._holds)
        for q, _, d, masked in holds:
            self.tree.add(q.leaf, d, -1.0)
            for pool, i in masked:
                pool.set_ready(i, True)
        ok = any(self._fits_without(p, f, now) for f in p.flavors)
        for q, _, d, masked in holds:
            self.tree.add(q.leaf, d)
            for pool, i in masked:
                pool.set_ready(i, False)
        return ok

    def _rank(self, p: Pending, now: float, repay_cache: dict[int, float]) -> tuple[int, float]:
        """(0, 0) within guarantee, else (1, -borrow score) (§4.2a-b)."""
        tree = self.tree
        if any(tree.within_guarantee(p.leaf, p.demand[f]) for f in p.flavors):
            return (0, 0.0)
        s = self.settings
        rep = repay_cache.get(p.leaf)
        if rep is None:
            rep = repay_cache[p.leaf] = self.repayment(p.leaf, now)
        att = tree.attainment(p.leaf, p.gpu_key)
        return (1, -(s.attainment_weight * (1.0 - min(1.0, att)) + s.repayment_weight * rep))

    def _order_key(self, p: Pending, rank: tuple[int, float],
                   cutoff: float) -> tuple[object, ...]:
        sub = p.spec.submitted_at
        if p.name in self.claims:
            return (-1, sub, 0, 0.0, p.order_tail)
        if sub < cutoff:
            return (0, sub, 0, 0.0, p.order_tail)
        return (1, 0.0, rank[0], rank[1], p.order_tail)

    def _fail(self, g: Group, reason: Reason, per_flavor: dict[str, Reason], now: float,
              res: CycleResult, held: dict[str, str]) -> None:
        """Give the group's remaining members the reason and park it until something helps."""
        rest = g.members[g.pos:]
        code = str(reason.code)
        if code != g.code:
            for m in rest:
                res.reasons[m.name] = reason
                g.unreported.discard(m.name)
            g.code = code
        else:
            for name in list(g.unreported):
                if name not in self.waiting:
                    res.reasons[name] = reason
                    g.unreported.discard(name)
        g.reason = reason
        p = rest[0]
        r0 = per_flavor.get(p.flavors[0], reason) if p.flavors else reason
        g.holds = bool(p.flavors) and r0.code != RC.COOLDOWN and not (
            r0.code == RC.QUOTA_MAX and "lowered by policy" in r0.message)
        if reason.code == RC.NO_CAPACITY and "held for starving" in reason.message:
            return  # a starving workload's hold can end any time: stay active
        tree = self.tree
        g.park = {}
        g.preempts = {}
        g.retry_at = INF
        cool = self.cooldown.get(p.leaf, -INF)
        if cool > now + EPS:
            g.retry_at = cool
        for f in p.flavors:
            d = p.demand[f]
            deficit: Demand = []
            for k, amount in d:
                short = amount - tree.available(p.leaf, k)
                if short > EPS:
                    deficit.append((k, short))
            g.park[f] = (self.free_events.get(f, 0),
                         {k: self.freed.get(k, 0.0) for k, _ in deficit}, deficit)
            if p.spec.can_preempt or tree.within_guarantee(p.leaf, d):
                g.preempts[f] = self.admits.get(f, 0)
        g.parked = True
        g.violating = False
        f0 = p.flavors[0]
        d0 = p.demand[f0]
        if (reason.code != RC.WAITING_FOR_PREEMPTION and p.name not in self.waiting and d0
                and tree.within_guarantee(p.leaf, d0)
                and any(tree.u[p.leaf][k] < tree.mn[p.leaf][k] - EPS for k, _ in d0)):
            g.violating = self.fits_if_borrowed_returned(p.name)

    def _wakes(self, g: Group, now: float) -> bool:
        """Could the parked group fit now? (conservative: True when unsure)."""
        if now + EPS >= g.retry_at:
            return True
        for f, seen in g.preempts.items():
            if self.admits.get(f, 0) != seen:
                return True
        for f, (events, snap, deficit) in g.park.items():
            if self.free_events.get(f, 0) == events:
                continue
            if all(self.freed.get(k, 0.0) - snap[k] + EPS >= short for k, short in deficit):
                return True
        return False

    def violating(self) -> bool:
        """Some parked group is within guarantee, below min, and would fit if all borrowed
        capacity were given back (the runner's min_guarantee_violation_s)."""
        return any(g.violating and g.parked for g in self.groups.values())

    def _timeout(self, a: Admitted, now: float, res: CycleResult) -> None:
        s = self.settings
        self.end(a.name, now)
        n = a.spec.backoff_count + 1
        until = now + backoff_delay(s, n)
        reason = Reason(RC.PODS_READY_TIMEOUT, (
            f"pods not all running {fmt(s.pods_ready_timeout_s)} s after admission to "
            f"{a.cluster}; retry #{n} after {fmt(until - now)} s backoff"))
        res.released.append(Release(a.name, reason, until, n))
        self.submit(replace(a.spec, not_before=until, backoff_count=n))

    def _consider(self, p: Pending, now: float, starving: bool, res: CycleResult,
                  held: dict[str, str]) -> tuple[int, Reason | None, dict[str, Reason]]:
        """Try one workload: admit, preempt for it, or say why it waits."""
        name = p.name
        self.claims.discard(name)
        reasons: dict[str, Reason] = {}
        if not p.flavors:
            return FAILED, p.static_reason or Reason(
                RC.FLAVOR_UNAVAILABLE, "no usable flavor"), reasons
        flav = list(p.flavors)
        waiting = name in self.waiting
        tree = self.tree
        leaf = p.leaf
        wg = {f: tree.within_guarantee(leaf, p.demand[f]) for f in flav}
        for f in flav:
            if wg[f]:
                r = self._try(p, f, False, now, res)
                if r is None:
                    return ADMITTED, None, reasons
                reasons[f] = r
        cool = self.cooldown.get(leaf, -INF)
        for f in flav:
            if wg[f]:
                continue
            d = p.demand[f]
            if not p.spec.preemptible:
                reasons[f] = tree.guarantee_reason(leaf, d) or Reason(
                    RC.NON_PREEMPTIBLE_BEYOND_MIN, f"queue {tree.paths[leaf]}: beyond min")
                continue
            if cool > now + EPS:
                reasons[f] = Reason(RC.COOLDOWN, (
                    f"queue {tree.paths[leaf]}: a workload was reclaimed; no borrowing "
                    f"admissions until {fmt(cool)} (reclaim_cooldown_s "
                    f"{fmt(self.settings.reclaim_cooldown_s)})"))
                continue
            r = self._try(p, f, True, now, res)
            if r is None:
                return ADMITTED, None, reasons
            reasons[f] = r
        outcome = FAILED
        if waiting:
            reason = self._waiting_reason(name, now)
            outcome = WAITING
        else:
            reason = reasons[flav[0]]
            for f in flav:
                if wg[f] or p.spec.can_preempt:
                    got = self._preempt(p, f, wg[f], now, res)
                    if got is None:
                        res.reasons[name] = self._waiting_reason(name, now)
                        return PREEMPTING, None, reasons
                    if got.code in (RC.BUDGET_EXCEEDED, RC.WAITING_FOR_PREEMPTION):
                        reason = got
                        break
        if starving:
            r0 = reasons.get(flav[0], reason)
            if flav[0] not in held and r0.code != RC.COOLDOWN and not (
                    r0.code == RC.QUOTA_MAX and "lowered by policy" in r0.message):
                held[flav[0]] = name
                self._hold(p, flav[0])
        elif outcome == FAILED and self._holds and self._fits_unheld(p, now):
            holders = sorted({q.name for q, f, _, _ in self._holds if f in flav})
            reason = Reason(RC.NO_CAPACITY, (
                f"flavor {flav[0]}: capacity held for starving workload "
                f"{', '.join(holders) or next(iter(held.values()))}"))
        if outcome == WAITING:
            res.reasons[name] = reason
        return outcome, reason, reasons

    def _waiting_reason(self, name: str, now: float) -> Reason:
        victims = sorted(self.waiting.get(name, ()))
        until = max((self.admitted[v].grace_until or now for v in victims if v in self.admitted),
                    default=now)
        return Reason(RC.WAITING_FOR_PREEMPTION, (
            f"waiting for {', '.join(victims)} to stop (grace until {fmt(until)})"))

    def _try(self, p: Pending, f: str, borrowed: bool, now: float,
             res: CycleResult) -> Reason | None:
        """Quota, then placement on flavor f; admit on success (None), else the reason."""
        d = p.demand[f]
        if not self.tree.fits(p.leaf, d):
            # An absent or unhealthy flavor explains more than the quota numbers do.
            return (self.fleet.flavor_problem(f, p.spec.allowed_clusters)
                    or self.tree.quota_reason(p.leaf, d))
        got = self._place(p, f, commit=True)
        if isinstance(got, Reason):
            return got
        cluster, nodes = got
        self.tree.add(p.leaf, d)
        self.seq += 1
        pool = self.fleet.by_name[cluster].pools[f]
        names = tuple(pool.names[i] for i in nodes)
        a = Admitted(p.spec, p.leaf, f, cluster, nodes, names, p.pods, d, borrowed, now,
                     self.seq)
        self._index_admitted(a)
        self.admits[f] = self.admits.get(f, 0) + 1
        del self.pending[p.name]
        self.waiting.pop(p.name, None)
        g = sum(x[0] for x in p.pods)
        res.admitted.append(Admit(p.name, cluster, f, names, borrowed, g,
                                  sum(x[1] for x in p.pods), sum(x[2] for x in p.pods)))
        return None

    def _place(self, p: Pending, f: str, *, commit: bool) -> tuple[str, list[int]] | Reason:
        strategy = p.spec.strategy or self.tree.strategy[p.leaf] or self.settings.strategy
        return self.fleet.try_place(
            f, p.pods, spread=strategy == "spread", same_rack=p.spec.topology_same == "rack",
            allowed=p.spec.allowed_clusters, dataset=p.spec.dataset, weights=self.weights,
            commit=commit)

    # ---- preemption ------------------------------------------------------------------

    def _fits_without(self, p: Pending, f: str, now: float) -> bool:
        d = p.demand[f]
        if not self.tree.fits(p.leaf, d):
            return False
        if not self.tree.within_guarantee(p.leaf, d):
            if not p.spec.preemptible or self.cooldown.get(p.leaf, -INF) > now + EPS:
                return False
        return not isinstance(self._place(p, f, commit=False), Reason)

    def _lift(self, a: Admitted) -> None:
        self.tree.add(a.leaf, a.demand, -1.0)
        if a.nodes:
            self.fleet.unassign(a.cluster, a.flavor, a.nodes, a.pods)

    def _drop(self, a: Admitted) -> None:
        self.tree.add(a.leaf, a.demand, 1.0)
        if a.nodes:
            self.fleet.assign(a.cluster, a.flavor, a.nodes, a.pods)

    def _grace_reason(self, p: Pending, f: str) -> Reason | None:
        """WAITING_FOR_PREEMPTION when capacity already in grace on f would make p fit."""
        going = list(self.in_grace.get(f, {}).values())
        if not going:
            return None
        for a in going:
            self._lift(a)
        ok = self._fits_without(p, f, -INF)
        for a in reversed(going):
            self._drop(a)
        if not ok:
            return None
        until = max(a.grace_until or 0.0 for a in going)
        names = ", ".join(sorted(a.name for a in going)[:5])
        return Reason(RC.WAITING_FOR_PREEMPTION, (
            f"flavor {f}: capacity is being freed by preempted {names} (grace until "
            f"{fmt(until)})"))

    def _reclaim_valid(self, a: Admitted, leaf: int, contested: list[int]) -> bool:
        tree = self.tree
        mine = set(tree.chain[leaf])
        for k in contested:
            node = a.leaf
            ok = True
            while node > 0 and node not in mine:
                if tree.u[node][k] <= tree.mn[node][k] + EPS:
                    ok = False
                    break
                node = tree.parent[node]
            if ok:
                return True
        return False

    def _budget_state(self) -> list[tuple[DisruptionBudget, set[str], int]]:
        out = []
        for b in self.budgets:
            sel = dict(b.selector)
            names = {a.name for a in self.admitted.values()
                     if all(a.spec.labels.get(k) == v for k, v in sel.items())}
            running = sum(self.admitted[n].spec.pod_count for n in names
                          if self.admitted[n].running and self.admitted[n].grace_until is None)
            out.append((b, names, running))
        return out

    def _preempt(self, p: Pending, f: str, reclaim: bool, now: float,
                 res: CycleResult) -> Reason | None:
        """Find and apply a minimal victim set on flavor f; None when preemption started."""
        tree = self.tree
        d = p.demand[f]
        contested = [k for k, _ in d]
        cands: list[tuple[tuple[float, ...], Admitted, PreemptionKind]] = []
        if reclaim and contested:
            for (leaf, fl), group in self.by_leaf_flavor.items():
                if fl != f or leaf == p.leaf or not group:
                    continue
                if not any(tree.borrowing(leaf, k) for k in contested):
                    continue
                ratio = max(tree.borrow_ratio(leaf, k) for k in contested)
                for a in group.values():
                    if a.spec.preemptible and a.grace_until is None:
                        cands.append(((-ratio, a.spec.priority, -a.admitted_at, -a.seq),
                                      a, PreemptionKind.RECLAIM))
        cands.sort(key=lambda t: t[0])
        if p.spec.can_preempt:
            own = [a for a in self.by_leaf_flavor.get((p.leaf, f), {}).values()
                   if a.spec.preemptible and a.grace_until is None
                   and a.spec.priority < p.spec.priority]
            own.sort(key=lambda a: (a.spec.priority, -a.admitted_at, -a.seq))
            cands.extend(((0.0,), a, PreemptionKind.PRIORITY) for a in own)
        if not cands:
            return self._grace_reason(p, f) or Reason(RC.NO_CAPACITY, "no preemptible victims")
        budgets = self._budget_state() if self.budgets else []
        removed: list[tuple[Admitted, PreemptionKind]] = []
        budget_block = ""
        fits = False
        for _, a, kind in cands:
            if kind == PreemptionKind.RECLAIM and not self._reclaim_valid(a, p.leaf, contested):
                continue
            blocked = False
            for b, names, running in budgets:
                if a.name in names and a.running:
                    left = running - a.spec.pod_count
                    if left < b.min_available:
                        blocked = True
                        budget_block = (f"preempting {a.name} would leave {left} running pods "
                                        f"< min_available {b.min_available} of budget "
                                        f"{b.name or dict(b.selector)}")
                        break
            if blocked:
                continue
            for i, (b, names, running) in enumerate(budgets):
                if a.name in names and a.running:
                    budgets[i] = (b, names, running - a.spec.pod_count)
            self._lift(a)
            removed.append((a, kind))
            if self._fits_without(p, f, now):
                fits = True
                break
        if not fits:
            for a, _ in reversed(removed):
                self._drop(a)
            if budget_block:
                return Reason(RC.BUDGET_EXCEEDED, budget_block)
            freeing = self._grace_reason(p, f)
            if freeing is not None:
                return freeing
            return Reason(RC.NO_CAPACITY, "preempting every valid victim would not make it fit")
        for i in range(len(removed) - 2, -1, -1):
            a, _ = removed[i]
            self._drop(a)
            if self._fits_without(p, f, now):
                del removed[i]
            else:
                self._lift(a)
        for a, _ in reversed(removed):
            self._drop(a)
        names = set()
        for a, kind in removed:
            grace_s = a.spec.termination_grace_s
            if grace_s is None:
                grace_s = self.settings.termination_grace_s
            a.grace_until = now + grace_s
            self.in_grace.setdefault(a.flavor, {})[a.name] = a
            a.preempted_by = p.name
            names.add(a.name)
            kn = key_name(tree.keys[contested[0]]) if contested else f
            if kind == PreemptionKind.RECLAIM:
                self.cooldown[a.leaf] = now + self.settings.reclaim_cooldown_s
                res.cooldowns[tree.paths[a.leaf]] = self.cooldown[a.leaf]
                k0 = contested[0]
                reason = Reason(RC.QUOTA_BORROW_UNAVAILABLE, (
                    f"queue {tree.paths[a.leaf]} {kn}: borrowed capacity reclaimed by {p.name} "
                    f"of queue {tree.paths[p.leaf]} (used {fmt(tree.u[a.leaf][k0])} > min "
                    f"{fmt(tree.mn[a.leaf][k0])})"))
            else:
                reason = Reason(RC.NO_CAPACITY, (
                    f"queue {tree.paths[a.leaf]}: preempted by {p.name} ({p.spec.priority_class}"
                    f" {p.spec.priority} > {a.spec.priority_class} {a.spec.priority})"))
            res.preempted.append(Preempt(a.name, p.name, kind, a.grace_until, reason))
        self.waiting[p.name] = names
        return None

    def fits_if_borrowed_returned(self, name: str) -> bool:
        """Would pending `name` fit on its first flavor if every borrowing leaf gave back what
        it borrows (preemptible work, most recent first, while the leaf stays above min)?
        Budgets and the LCA rule are ignored: this is the yardstick of I2 and the metric."""
        p = self.pending.get(name)
        if p is None or not p.flavors:
            return False
        f = p.flavors[0]
        tree = self.tree
        contested = [k for k, _ in p.demand[f]]
        lifted: list[Admitted] = []
        for (leaf, fl), group in sorted(self.by_leaf_flavor.items()):
            if fl != f or leaf == p.leaf:
                continue
            for a in sorted(group.values(), key=lambda a: (-a.admitted_at, -a.seq)):
                if a.grace_until is not None:
                    self._lift(a)
                    lifted.append(a)
                    continue
                if not a.spec.preemptible:
                    continue
                if not any(tree.borrowing(leaf, k) for k in contested):
                    break
                self._lift(a)
                lifted.append(a)
        ok = self._fits_without(p, f, -INF)
        for a in reversed(lifted):
            self._drop(a)
        return ok

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
