"""Preemption (QUOTA-SEMANTICS.md §5): reclaim, priority, minimal victim sets, budgets.

Choices where the semantics page is silent (Kueue's behaviour unless said otherwise):
- Reclaim victims run on the preemptor's flavor, in another leaf, are preemptible and not in
  grace, and on some contested key their leaf and every ancestor below the lowest common
  ancestor are above min. Priority victims are in the same leaf with a strictly lower priority.
  Reclaim candidates come before priority candidates; the set is filled greedily, then
  minimised by putting back every victim but the last that is not needed (Kueue).
- Victims in grace are never chosen twice. The preemptor is nominated for what its victims
  free (`nomination`): it chooses no new victims until they have ended, and what they free is
  kept for it.
- A victim's reason: reclaim -> QUOTA_BORROW_UNAVAILABLE, priority -> NO_CAPACITY, naming
  the preemptor.
- Disruption budgets count running pods of running workloads not in grace.
"""

from __future__ import annotations

from scheduling.engine.accounting import EPS, INF, fmt, key_name
from scheduling.engine.nomination import NominationMixin
from scheduling.engine.state import (
    RC,
    Admitted,
    Pending,
)
from scheduling.engine.types import (
    CycleResult,
    DisruptionBudget,
    Preempt,
    PreemptionKind,
    Reason,
)

# A victim candidate: (sort key, the admitted workload, why it would be preempted).
Candidate = tuple[tuple[float, ...], Admitted, PreemptionKind]


class PreemptionMixin(NominationMixin):
    """Victim search and the what-if checks it needs."""

    def _place(self, p: Pending, f: str, *, commit: bool,
               brief: bool = False) -> tuple[str, list[int]] | Reason:
        strategy = p.spec.strategy or self.tree.strategy[p.leaf] or self.settings.strategy
        return self.fleet.try_place(
            f, p.pods, spread=strategy == "spread", same_rack=p.spec.topology_same == "rack",
            allowed=p.spec.allowed_clusters, dataset=p.spec.dataset, weights=self.weights,
            commit=commit, brief=brief)

    def _can_place(self, p: Pending, f: str) -> bool:
        """`_place` (commit=False) succeeds, without building its reason."""
        strategy = p.spec.strategy or self.tree.strategy[p.leaf] or self.settings.strategy
        return self.fleet.can_place(
            f, p.pods, spread=strategy == "spread", same_rack=p.spec.topology_same == "rack",
            allowed=p.spec.allowed_clusters, dataset=p.spec.dataset, weights=self.weights)

    # ---- preemption ------------------------------------------------------------------

    def _fits_without(self, p: Pending, f: str, now: float) -> bool:
        d = p.demand[f]
        if not self.tree.fits(p.leaf, d):
            return False
        if not self.tree.within_guarantee(p.leaf, d):
            if not p.spec.preemptible or self.cooldown.get(p.leaf, -INF) > now + EPS:
                return False
        return self._can_place(p, f)

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
        lifted: list[Admitted] = []
        ok = False
        quota_ok = self.tree.fits(p.leaf, p.demand[f])
        for a in going:
            self._lift(a)
            lifted.append(a)
            # Placement is the costly check: only once the quota fits.
            if (quota_ok or self.tree.fits(p.leaf, p.demand[f])) and self._fits_without(
                    p, f, -INF):
                ok = True
                break
        for a in reversed(lifted):
            self._drop(a)
        if not ok:
            return None
        going = lifted
        until = max(a.grace_until or 0.0 for a in going)
        names = ", ".join(sorted(a.name for a in going)[:5])
        return Reason(RC.WAITING_FOR_PREEMPTION, (
            f"flavor {f}: capacity is being freed by preempted {names} (grace until "
            f"{fmt(until)})"))

    def _real_borrowing(self, q: int, k: int) -> bool:
        """Borrowing on k by real usage: a starving workload's hold is not usage."""
        return self.tree.u[q][k] - self.phantom.get((q, k), 0.0) > self.tree.mn[q][k] + EPS

    def _reclaim_valid(self, a: Admitted, mine: set[int], contested: list[int]) -> bool:
        """On some contested key, a's leaf and every ancestor up to (not including) the lowest
        common ancestor with the preemptor's leaf (`mine`: its chain) are above min."""
        tree = self.tree
        u, mn, parent, phantom = tree.u, tree.mn, tree.parent, self.phantom
        for k in contested:
            node = a.leaf
            ok = True
            while node > 0 and node not in mine:
                if u[node][k] - phantom.get((node, k), 0.0) <= mn[node][k] + EPS:
                    ok = False
                    break
                node = parent[node]
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
        contested = [k for k, _ in p.demand[f]]
        cands = self._victim_candidates(p, f, reclaim, contested)
        if not cands:
            return self._grace_reason(p, f) or Reason(RC.NO_CAPACITY, "no preemptible victims")
        found = self._victims(p, f, cands, contested, now)
        if isinstance(found, Reason):
            return found
        self._start_preemption(p, f, found, contested, now, res)
        return None

    def _victim_candidates(self, p: Pending, f: str, reclaim: bool,
                           contested: list[int]) -> list[Candidate]:
        """p's victim candidates on flavor f in the order they are tried (§5): reclaim
        candidates (from the leaf that borrows most, then lower priority, then most recently
        admitted), then lower-priority work of p's own leaf when p may preempt."""
        tree = self.tree
        cands: list[Candidate] = []
        if reclaim and contested:
            for (leaf, fl), group in self.by_leaf_flavor.items():
                if fl != f or leaf == p.leaf or not group:
                    continue
                if not any(self._real_borrowing(leaf, k) for k in contested):
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
        return cands

    def _victims(self, p: Pending, f: str, cands: list[Candidate], contested: list[int],
                 now: float) -> list[tuple[Admitted, PreemptionKind]] | Reason:
        """A minimal victim set that makes p fit on flavor f: filled greedily in candidate
        order (valid reclaim victims, budgets permitting), then every victim but the last put
        back when p fits without it. The usage is left as it was. Else why none makes p fit."""
        tree = self.tree
        d = p.demand[f]
        budgets = self._budget_state() if self.budgets else []
        removed: list[tuple[Admitted, PreemptionKind]] = []
        budget_block = ""
        fits = False
        mine = set(tree.chain[p.leaf])
        unplaced: list[Admitted] = []  # lifted from the quota, still on their nodes
        for _, a, kind in cands:
            if kind == PreemptionKind.RECLAIM and not self._reclaim_valid(a, mine, contested):
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
            # The quota is lifted at once; the nodes only when the quota fits, which is when
            # `_fits_without` looks at them (a search that never fits the quota moves no pod).
            tree.add(a.leaf, a.demand, -1.0)
            removed.append((a, kind))
            unplaced.append(a)
            if not tree.fits(p.leaf, d):
                continue
            for v in unplaced:
                if v.nodes:
                    self.fleet.unassign(v.cluster, v.flavor, v.nodes, v.pods)
            unplaced.clear()
            if self._fits_without(p, f, now):
                fits = True
                break
        if not fits:
            # (The victims still on their nodes are the last ones lifted.)
            moved = len(removed) - len(unplaced)
            for i in range(len(removed) - 1, -1, -1):
                a = removed[i][0]
                if i >= moved:
                    tree.add(a.leaf, a.demand, 1.0)
                else:
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
        return removed

    def _start_preemption(self, p: Pending, f: str, removed: list[tuple[Admitted, PreemptionKind]],
                          contested: list[int], now: float, res: CycleResult) -> None:
        """The victims enter their grace period with their reason; a reclaim starts its
        victim's leaf's cooldown; p waits for them, nominated for what they free."""
        tree = self.tree
        names = set()
        self.changes += 1
        for a, kind in removed:
            grace_s = a.spec.termination_grace_s
            if grace_s is None:
                grace_s = self.settings.termination_grace_s
            a.grace_until = now + grace_s
            self.in_grace.setdefault(a.flavor, {})[a.name] = a
            # A victim in grace is no victim for another preemptor, and its capacity is being
            # freed: parked preemptors on its flavor (or of its leaf) may now find another
            # victim set, or none, as a fresh evaluation would (`ParkingMixin._wakes`; and
            # `changes`, counted above, or its quick answer would say nothing happened).
            self.admits[a.flavor] = self.admits.get(a.flavor, 0) + 1
            self.leaf_admits[a.leaf] = self.leaf_admits.get(a.leaf, 0) + 1
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
        self._nominate(p.name, f, [a for a, _ in removed], now, res)

    def fits_if_borrowed_returned(self, name: str) -> bool:
        """Would pending `name` fit on its first flavor if every borrowing leaf gave back what
        it borrows (preemptible work, most recent first, while the leaf stays above min)?
        Budgets and the LCA rule are ignored: this is the yardstick of I2 and the metric. A
        starving workload's hold is not borrowing (it is not usage)."""
        p = self.pending.get(name)
        if p is None or not p.flavors:
            return False
        f = p.flavors[0]
        contested = [k for k, _ in p.demand[f]]
        lifted: list[Admitted] = []
        tree = self.tree
        # The quota first; the nodes only if the quota then fits (`_fits_without` looks at
        # them only then).
        grace_leaves = {a.leaf for a in self.in_grace.get(f, {}).values()}
        for (leaf, fl), group in sorted(self.by_leaf_flavor.items()):
            if fl != f or leaf == p.leaf:
                continue
            if leaf not in grace_leaves and not any(
                    self._real_borrowing(leaf, k) for k in contested):
                # Nothing of it would be lifted (no victim in grace; the walk below stops at
                # its first preemptible workload): not sorted, which cost the cycle most of
                # this check with a few hundred leaves.
                continue
            for a in sorted(group.values(), key=lambda a: (-a.admitted_at, -a.seq)):
                if a.grace_until is not None:
                    tree.add(a.leaf, a.demand, -1.0)
                    lifted.append(a)
                    continue
                if not a.spec.preemptible:
                    continue
                if not any(self._real_borrowing(leaf, k) for k in contested):
                    break
                tree.add(a.leaf, a.demand, -1.0)
                lifted.append(a)
        placed = tree.fits(p.leaf, p.demand[f])
        if placed:
            for a in lifted:
                if a.nodes:
                    self.fleet.unassign(a.cluster, a.flavor, a.nodes, a.pods)
        ok = self._fits_without(p, f, -INF)
        for a in reversed(lifted):
            if placed:
                self._drop(a)
            else:
                tree.add(a.leaf, a.demand, 1.0)
        return ok
