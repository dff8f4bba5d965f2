"""Starvation holds (QUOTA-SEMANTICS.md §4.3): a starving workload that does not fit keeps
what it needs from the workloads after it in the cycle; their reasons name it, with the numbers
they would see without the holds.

Choices where the semantics page is silent:
- A starving workload that does not fit holds a reservation on its first usable flavor for the
  rest of the cycle: its demand as phantom usage in the quota tree, and, when its quota fits but
  no nodes do, the nodes that could hold its gang (most free GPUs first) are kept from later
  workloads. Later workloads that would have fit without the hold get NO_CAPACITY naming it.
  It does not hold when a policy-lowered max or its cooldown blocks it (holding would idle the
  flavor and, for a reclaimed borrower, take back what was reclaimed).
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.engine.accounting import EPS, INF, fmt
from scheduling.engine.pool import Pool
from scheduling.engine.preemption import PreemptionMixin
from scheduling.engine.state import RC, Pending
from scheduling.engine.types import Reason


class HoldsMixin(PreemptionMixin):
    """Holds taken and given back within a cycle, and the reasons given around them."""

    def _hold(self, p: Pending, f: str) -> None:
        """A starving workload that does not fit holds what it needs on flavor f for the rest
        of the cycle (§4.3): its demand is reserved in the quota tree (a phantom admission),
        and when its quota fits but no nodes do, the nodes with the most free GPUs that could
        hold its gang are kept from later workloads, so they drain towards it (with
        `topology: {same: rack}`: nodes of one rack, the one with the most free GPUs among the
        racks big enough for the gang)."""
        d = p.demand[f]
        quota_ok = self.tree.fits(p.leaf, d)
        self.tree.add(p.leaf, d)
        for node in self.tree.chain[p.leaf]:
            for k, amount in d:
                self.phantom[(node, k)] = self.phantom.get((node, k), 0.0) + amount
        masked: list[tuple[Pool, int]] = []
        need = sum(x[0] for x in p.pods)
        found = self.fleet.flavor_problem(f, p.spec.allowed_clusters)
        if quota_ok and need and found is None:
            clusters = [c for c in self.fleet.flavor_clusters.get(f, [])
                        if self.fleet.healthy(c) and (p.spec.allowed_clusters is None
                                                      or c.name in p.spec.allowed_clusters)]
            best = clusters[0] if len(clusters) == 1 else max(
                clusters, key=lambda c: (sum(g for g, r in zip(
                    c.pools[f].gpus, c.pools[f].ready, strict=True) if r),
                    c.pools[f].free_gpus(), c.name), default=None)
            if best is not None:
                pool = best.pools[f]
                order: Iterable[int]
                if p.spec.topology_same == "rack":
                    # Its gang must land in one rack: hold nodes of one rack only (the one
                    # with the most free GPUs among those big enough), so that rack drains.
                    ready = [i for i in range(len(pool.names)) if pool.ready[i]]
                    total: dict[str, int] = {}
                    free: dict[str, int] = {}
                    for i in ready:
                        r = pool.rack[i]
                        total[r] = total.get(r, 0) + pool.gpus[i]
                        free[r] = free.get(r, 0) + max(pool.fg[i], 0)
                    racks = sorted((r for r in total if total[r] >= need),
                                   key=lambda r: (-free[r], r))
                    order = sorted((i for i in ready if racks and pool.rack[i] == racks[0]),
                                   key=lambda i: (-max(pool.fg[i], 0), i))
                else:
                    # The ready nodes by most free GPUs, then index: the free-GPU index's
                    # order, walked only as far as the gang's GPUs.
                    order = (i for bucket in reversed(pool.buckets) for i in bucket)
                take: list[int] = []
                room = 0
                for i in order:
                    if room >= need:
                        break
                    take.append(i)
                    room += pool.gpus[i]
                for i in take:  # (not while walking: taking a node moves it in the index)
                    pool.set_ready(i, False)
                    masked.append((pool, i))
        self._holds.append((p, f, d, masked))

    def _may_hold(self, p: Pending, r0: Reason, now: float) -> bool:
        """Whether p, starving and failing with r0 on its first flavor, holds it: not when a
        policy-lowered max blocks it, nor when it would borrow there while its queue cools
        down. The cooldown is asked directly, not read off r0: r0 names the cooldown only when
        nothing else blocks p (`_evaluate`), so reading it off r0 made p hold once the fleet
        filled up and not while it had room, and a parked group kept what it had at its last
        failure where an engine rebuilt from a snapshot decided afresh."""
        if not p.flavors or (r0.code == RC.QUOTA_MAX and "lowered by policy" in r0.message):
            return False
        return not (p.spec.preemptible and self.cooldown.get(p.leaf, -INF) > now + EPS
                    and not self.tree.within_guarantee(p.leaf, p.demand[p.flavors[0]]))

    def _release_holds(self) -> None:
        """End of cycle: give back held quota and nodes. Not counted as freed: groups parked
        while a hold was in place computed their deficits without it, and groups held back by
        a hold wait for their holders (`CycleMixin._walk`)."""
        for p, _, d, masked in reversed(self._holds):
            self.tree.add(p.leaf, d, -1.0)
            for pool, i in masked:
                pool.set_ready(i, True)
        self._holds.clear()
        self.phantom.clear()

    def _holders(self, p: Pending) -> tuple[str, Reason | None]:
        """The starving workloads holding p's flavors in this cycle ("a, b"), and the reason
        that names them (None when none holds them); kept per flavors and number of holds."""
        got = self._holders_of(p)
        return got[1], got[2]

    def _held_by(self, p: Pending) -> tuple[str, ...]:
        """The names of `_holders`, sorted."""
        return self._holders_of(p)[0]

    def _holders_of(self, p: Pending) -> tuple[tuple[str, ...], str, Reason | None]:
        key = (len(self._holds), p.flavor_key)
        got = self._holders_cache.get(key)
        if got is None:
            names = tuple(sorted({q.name for q, f, _, _ in self._holds if f in p.flavors}))
            holders = ", ".join(names)
            reason = Reason(RC.NO_CAPACITY, (
                f"flavor {p.flavors[0]}: capacity held for starving workload {holders}"
            )) if names else None
            got = self._holders_cache[key] = (names, holders, reason)
        return got

    def _unheld_reason(self, p: Pending, now: float) -> Reason | None:
        """With every hold lifted: None when p would fit on some flavor, else its reason on
        its first flavor with real numbers (a phantom hold must not show up in a message).
        Computed on `real` (the tree without the holds); the held nodes are only given back
        for a placement that is not known yet for this state (`_unheld_place`)."""
        real = self.real
        leaf = p.leaf
        demand = p.demand
        fitting = [f for f in p.flavors if real.fits(leaf, demand[f])]
        if fitting:
            cooling = self.cooldown.get(leaf, -INF) > now + EPS
            for f in fitting:
                # (`_fits_without`, with the placement answer cached, below.)
                if (not real.within_guarantee(leaf, demand[f])
                        and (not p.spec.preemptible or cooling)):
                    continue
                if self._unheld_place(p, f, False) is True:
                    return None
            return self._plain_reason(p, p.flavors[0], now, True)
        return self._plain_reason(p, p.flavors[0], now, False)

    def _unmask(self, ready: bool) -> None:
        """Give the held nodes back (ready True) or take them again."""
        for _, _, _, masked in self._holds:
            for pool, i in masked:
                pool.set_ready(i, ready)

    def _unheld_place(self, p: Pending, f: str, reason: bool) -> bool | Reason:
        """Whether p can be placed on flavor f with every hold lifted (True, else False or,
        with `reason`, why not). Within a cycle the fleet then changes only by admissions
        (`changes`), so the answer is kept per shape for the cycle: identical pods of other
        queues get it without a new placement."""
        shape = p.place_key
        if shape is None:
            strategy = p.spec.strategy or self.tree.strategy[p.leaf] or self.settings.strategy
            shape = p.place_key = (tuple(p.pods), strategy, p.spec.topology_same,
                                   p.spec.allowed_clusters, p.spec.dataset)
        key = (self.changes, f, shape)
        cache = self._unheld_cache
        got = cache.get(key)
        if got is True or isinstance(got, Reason) or (got is False and not reason):
            return got
        self._unmask(True)
        try:
            if reason:
                placed = self._place(p, f, commit=False)
                cache[key] = got = placed if isinstance(placed, Reason) else True
            else:
                cache[key] = got = self._can_place(p, f)
        finally:
            self._unmask(False)
        return got

    def _plain_reason(self, p: Pending, f: str, now: float, unmasked: bool) -> Reason:
        """Why p does not fit on flavor f now, in the order the cycle checks, with the holds
        lifted (`real`; `unmasked`: the held nodes count as ready, as they do when p's quota
        fits on some flavor)."""
        tree, d = self.real, p.demand[f]
        wg = tree.within_guarantee(p.leaf, d)
        if not wg and not p.spec.preemptible:
            r = tree.guarantee_reason(p.leaf, d)
            if r is not None:
                return r
        if not tree.fits(p.leaf, d):
            if unmasked and self._holds:
                self._unmask(True)
                try:
                    problem = self.fleet.flavor_problem(f, p.spec.allowed_clusters)
                finally:
                    self._unmask(False)
            else:
                problem = self.fleet.flavor_problem(f, p.spec.allowed_clusters)
            return (problem or tree.quota_reason(p.leaf, d)
                    or Reason(RC.QUOTA_BORROW_UNAVAILABLE, f"flavor {f}: no room"))
        placed = self._unheld_place(p, f, True)
        if isinstance(placed, Reason):
            return placed
        cool = self.cooldown.get(p.leaf, -INF)
        if not wg and cool > now + EPS:
            return Reason(RC.COOLDOWN, (
                f"queue {tree.paths[p.leaf]}: a workload was reclaimed; no borrowing "
                f"admissions until {fmt(cool)} (reclaim_cooldown_s "
                f"{fmt(self.settings.reclaim_cooldown_s)})"))
        return Reason(RC.NO_CAPACITY, f"flavor {f}: no room")
