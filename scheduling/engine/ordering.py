"""The candidate order of a cycle (QUOTA-SEMANTICS.md §4.2): within guarantee before
borrowers, borrowers by borrow score, starving work first within its class, then priority,
FIFO and name.

Choices where the semantics page is silent:
- A workload is "within guarantee" when it is on any of its flavors; the borrow score uses its
  first flavor's GPU key at its leaf.
- A preemptor whose victims are all gone goes first in the next cycle, before starving work:
  the capacity was freed for it (otherwise reclaim can repeat after every cooldown, or another
  workload takes the node and the preemptor preempts again; `nomination`).
"""

from __future__ import annotations

import heapq

from scheduling.engine.accounting import EPS
from scheduling.engine.parking import ParkingMixin
from scheduling.engine.state import Group, Pending
from scheduling.engine.types import CycleResult

# A cycle's order as it starts (`OrderingMixin._order`), walked by `CycleMixin._walk`: the heap
# of (order key, group id, group); the start-of-cycle rank per group id; the parked, starving
# groups that only take their hold at their turn, and their leaf's attainment at the start; the
# groups held back by starving holds in their last cycle (tried if one does not hold again); the
# parked groups that may get victims in this cycle; the starvation cutoff (submitted before it:
# starving); whether every group is evaluated, parked or not; the repayment per leaf, fixed for
# the cycle. A plain tuple: it is built in every cycle, and a NamedTuple's constructor is a
# Python call.
Turns = tuple[list[tuple[tuple[object, ...], int, Group]], dict[int, tuple[int, float]], set[int],
              dict[tuple[int, int | None], float], set[int], list[tuple[tuple[object, ...], Group]],
              float, bool, dict[int, float]]


class OrderingMixin(ParkingMixin):
    """The order of a cycle's turns: ranks and order keys of pending workloads."""

    def _order(self, now: float, res: CycleResult) -> Turns | None:
        """The cycle's order at its start (§4.2): every group that takes part, keyed by its
        head; parked groups stay out except those that hold, wait for their holders or may
        preempt. None when nothing would be tried: the cycle would only take holds and give
        them back."""
        cutoff = now - self.settings.starvation_s
        full = self.full or not self.parking
        self.full = False
        repay_cache: dict[int, float] = {}
        self._scores = {}
        self._unheld_cache = {}
        self._holders_cache = {}
        self._defer = {}
        self._promoted = set()
        entries, base, hold_only, start_att, parked, held_back = self._entries(
            now, res, cutoff, full, repay_cache)
        heap: list[tuple[tuple[object, ...], int, Group]] = []
        self._find_deferred(entries, parked + held_back, cutoff)
        for g, rank in entries:
            heap.append((self._order_key(g.members[0], rank, cutoff), id(g), g))
        # Groups held back by a starving workload's hold in their last cycle take their place
        # in the order; when their turn comes and the same holders hold again, they fail the
        # same way and stay parked without being tried.
        conditional: set[int] = set()
        for g in held_back:
            rank = self._rank(g.members[0], now, repay_cache)
            base[id(g)] = rank
            conditional.add(id(g))
            heap.append((self._order_key(g.members[0], rank, cutoff), id(g), g))
        if len(hold_only) == len(entries) and self._nothing_to_try(heap, hold_only):
            return None
        heapq.heapify(heap)
        # Parked groups that could preempt: an admission later in this cycle may give them
        # new victims, and then they are tried after it (with their start-of-cycle key).
        preemptors: list[tuple[tuple[object, ...], Group]] = []
        for g in parked:
            if g.preempts:
                head = g.members[0]
                rank = base[id(g)] = self._rank(head, now, repay_cache)
                preemptors.append((self._order_key(head, rank, cutoff), g))
        return (heap, base, hold_only, start_att, conditional, preemptors, cutoff, full,
                repay_cache)

    def _entries(self, now: float, res: CycleResult, cutoff: float, full: bool,
                 repay_cache: dict[int, float]
                 ) -> tuple[list[tuple[Group, tuple[int, float]]], dict[int, tuple[int, float]],
                            set[int], dict[tuple[int, int | None], float], list[Group],
                            list[Group]]:
        """One pass over the groups at the start of a cycle: the woken ones and the parked
        starving ones that hold, with their start-of-cycle rank (what a full evaluation
        orders every member by; `entries` and `base`); of those, the ones that only hold
        (`hold_only`, their leaf's attainment in `start_att`); the other parked groups, those
        held back by holders apart. Members that joined a parked group get its reason."""
        base: dict[int, tuple[int, float]] = {}
        hold_only: set[int] = set()
        start_att: dict[tuple[int, int | None], float] = {}
        entries: list[tuple[Group, tuple[int, float]]] = []
        parked: list[Group] = []
        held_back: list[Group] = []
        changes = self.changes
        now_eps = now + EPS
        for g in self.groups.values():
            # (`_wakes`, its quick answer inlined: nothing admitted or ended since its last no)
            if g.parked and not full and (
                    (g.quiet == changes and now_eps < g.retry_at) or not self._wakes(g, now)):
                if g.unreported and g.reason is not None:
                    for name in list(g.unreported):
                        if name not in self.waiting:
                            res.reasons[name] = g.reason
                            self.pending[name].last_code = g.code
                            g.unreported.discard(name)
                head = g.members[0]
                if (g.holds and head.spec.submitted_at < cutoff and g.reason is not None
                        and self._may_hold(head, g.reason, now)):
                    # Still cannot fit, still starving: it keeps holding its flavor, in its
                    # place among the starving work of its class (not while its queue cools
                    # down from a reclaim begun since it was parked).
                    hold_only.add(id(g))
                    if self._within(head):
                        rank = (0, 0.0)
                    else:
                        # Its score is only needed if it is woken: its leaf's attainment
                        # now is kept for it (`CycleMixin._walk`).
                        rank = (1, 0.0)
                        sk = (head.leaf, head.gpu_key)
                        if sk not in start_att:
                            start_att[sk] = self.tree.attainment(head.leaf, head.gpu_key)
                    base[id(g)] = rank
                    entries.append((g, rank))
                elif g.held_by:
                    held_back.append(g)
                else:
                    parked.append(g)
                continue
            self._unpark(g)
            rank = self._rank(g.members[0], now, repay_cache)
            base[id(g)] = rank
            entries.append((g, rank))
        return entries, base, hold_only, start_att, parked, held_back

    @staticmethod
    def _nothing_to_try(heap: list[tuple[tuple[object, ...], int, Group]],
                        hold_only: set[int]) -> bool:
        """With no group woken at the start of a cycle (every entry holds only, or waits for
        its holders), is there nothing to try in it? Nothing is admitted, so a group that
        only holds holds at its turn when it is the first on its flavor, and one held back
        by holders is tried only if one of them does not hold before its turn: when each of
        those finds its holders holding before it, the cycle only takes holds and gives them
        back."""
        first: dict[str, tuple[tuple[object, ...], str]] = {}
        waiters = []
        for entry in heap:
            key, gid, g = entry
            if g.held_by:
                waiters.append(entry)
            if gid in hold_only:
                head = g.members[0]
                if head.flavors:
                    f = head.flavors[0]
                    got = first.get(f)
                    if got is None or key < got[0]:
                        first[f] = (key, head.name)
        if not waiters:
            return True
        holds_at = {name: k for k, name in first.values()}
        for key, _, g in waiters:
            for name in g.held_by:
                at = holds_at.get(name)
                if at is None or not at < key:
                    return False
        return True

    def _rank(self, p: Pending, now: float, repay_cache: dict[int, float]) -> tuple[int, float]:
        """(0, 0) within guarantee, else (1, -borrow score) (§4.2a-b)."""
        if self._within(p):
            return (0, 0.0)
        # The score depends on the leaf's usage (its top-level queue's usage version) and its
        # repayment, fixed for the cycle: cached for the cycle per leaf and GPU key.
        tree = self.tree
        ver = tree.ver[tree.chain[p.leaf][0]]
        key = (p.leaf, p.gpu_key)
        hit = self._scores.get(key)
        if hit is not None and hit[0] == ver:
            return (1, hit[1])
        score = self._score(p.leaf, tree.attainment(p.leaf, p.gpu_key), now, repay_cache)
        self._scores[key] = (ver, score)
        return (1, score)

    def _score(self, leaf: int, att: float, now: float, repay_cache: dict[int, float]) -> float:
        """-borrow score of a leaf with attainment att (§4.2b)."""
        s = self.settings
        rep = repay_cache.get(leaf)
        if rep is None:
            rep = repay_cache[leaf] = self.repayment(leaf, now)
        return -(s.attainment_weight * (1.0 - min(1.0, att)) + s.repayment_weight * rep)

    def _within(self, p: Pending) -> bool:
        tree = self.tree
        v = tree.ver[tree.chain[p.leaf][0]]
        if p.wg_ver != v:
            p.wg_ver = v
            p.wg = any(tree.within_guarantee(p.leaf, p.demand[f]) for f in p.flavors)
        return p.wg

    def _order_key(self, p: Pending, rank: tuple[int, float],
                   cutoff: float) -> tuple[object, ...]:
        """(class, not starving, submitted if starving, -score, priority/FIFO/name).

        Class: -1 a preemptor whose victims are gone, 0 within guarantee, 1 would borrow.
        Starving work comes first within its class: a workload that would borrow never goes
        ahead of (or holds capacity against) within-guarantee work of another leaf, which
        would only reclaim it in the same cycle (§5 guarantee before elasticity, I2). Younger
        within-guarantee work of its own leaf does not pass it either: the leaf's oldest
        starving borrower and that work go together after the other within-guarantee work
        and before every other borrower (second field 2)."""
        sub = p.spec.submitted_at
        if p.name in self.claims:
            return (-1, 0, sub, 0.0, p.order_tail)
        oldest = self._defer.get(p.leaf)
        if oldest is not None:
            if rank[0] == 1 and p.name in self._promoted:
                # The leaf's oldest starving workload that would borrow, with younger
                # within-guarantee work of its leaf: after the other leaves' within-guarantee
                # work, before every other borrower.
                return (0, 2, sub, 0.0, p.order_tail)
            if rank[0] == 0 and sub >= oldest:
                # May not pass its leaf's older starving workload (BestEffortFIFO starvation
                # protection inside the leaf): right behind it.
                return (0, 2, oldest, 0.5, p.order_tail)
        if sub < cutoff:
            return (rank[0], 0, sub, 0.0, p.order_tail)
        return (rank[0], 1, 0.0, rank[1], p.order_tail)

    def _find_deferred(self, entries: list[tuple[Group, tuple[int, float]]],
                       parked: list[Group], cutoff: float) -> None:
        """Leaves whose oldest starving workload would borrow while younger within-guarantee
        work of the same leaf waits (parked groups count too, so the order does not depend on
        what is parked): `_defer` leaf -> its submit time, `_promoted` its name."""
        best: dict[int, tuple[float, tuple[int, float, str]]] = {}

        def offer(q: Pending) -> None:
            sub = q.spec.submitted_at
            if sub < cutoff:
                cur = best.get(q.leaf)
                if cur is None or (sub, q.order_tail) < cur:
                    best[q.leaf] = (sub, q.order_tail)

        claims = self.claims
        for g, rank in entries:
            if rank[0] == 1:
                # The group's oldest member that is not a preemptor going first (those are
                # moved to the front).
                members = g.members
                q: Pending | None = members[0]
                if claims and members[0].name in claims:
                    q = next((m for m in members if m.name not in claims), None)
                if q is not None:
                    # (`offer`, inlined.)
                    sub = q.spec.submitted_at
                    if sub < cutoff:
                        cur = best.get(q.leaf)
                        if cur is None or (sub, q.order_tail) < cur:
                            best[q.leaf] = (sub, q.order_tail)
        for g in parked:
            q = g.members[0]
            if q.spec.submitted_at < cutoff and (
                    q.leaf not in best or (q.spec.submitted_at, q.order_tail) < best[q.leaf]) \
                    and not self._within(q):
                offer(q)
        if not best:
            return
        # Only leaves where within-guarantee work would otherwise pass their starving one.
        younger = {g.members[0].leaf for g, rank in entries if rank[0] == 0
                   and g.members[0].leaf in best
                   and g.members[-1].spec.submitted_at >= best[g.members[0].leaf][0]}
        for g in parked:
            q = g.members[0]
            if (q.leaf in best and q.leaf not in younger
                    and g.members[-1].spec.submitted_at >= best[q.leaf][0] and self._within(q)):
                younger.add(q.leaf)
        for leaf, (sub, tail) in best.items():
            if leaf in younger:
                self._defer[leaf] = sub
                self._promoted.add(tail[2])
