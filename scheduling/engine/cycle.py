"""The admission cycle (QUOTA-SEMANTICS.md §4, §7): order, holds, groups, reasons.

Choices where the semantics page is silent:
- Candidate order: a workload is "within guarantee" when it is on any of its flavors; the
  borrow score uses its first flavor's GPU key at its leaf.
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
  (WAITING_FOR_PREEMPTION).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from dataclasses import replace

from scheduling.engine.accounting import EPS, INF, Demand, QuotaTree, fmt
from scheduling.engine.pool import Pool
from scheduling.engine.preemption import PreemptionMixin
from scheduling.engine.state import (
    ADMITTED,
    FAILED,
    PREEMPTING,
    RC,
    WAITING,
    Admitted,
    Group,
    Pending,
    backoff_delay,
)
from scheduling.engine.types import (
    Admit,
    CycleResult,
    Reason,
    Release,
)

REFRESH = 50  # group members whose reasons follow every change
QUOTA_CODES = frozenset({str(RC.QUOTA_MAX), str(RC.QUOTA_BORROW_UNAVAILABLE), str(RC.NO_CAPACITY)})


class CycleMixin(PreemptionMixin):
    """One admission cycle over the engine's state."""

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
        full = self.full or not self.parking
        self.full = False
        repay_cache: dict[int, float] = {}
        self._scores = {}
        self._unheld_cache = {}
        self._holders_cache = {}
        heap: list[tuple[tuple[object, ...], int, Group]] = []
        # Start-of-cycle rank per group (what a full evaluation orders every member by).
        base: dict[int, tuple[int, float]] = {}
        hold_only: set[int] = set()
        start_att: dict[tuple[int, int | None], float] = {}
        entries: list[tuple[Group, tuple[int, float]]] = []
        self._defer = {}  # leaf -> its oldest starving workload that would borrow
        self._promoted = set()
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
                if g.holds and head.spec.submitted_at < cutoff:
                    # Still cannot fit, still starving: it keeps holding its flavor, in its
                    # place among the starving work of its class.
                    hold_only.add(id(g))
                    if self._within(head):
                        rank = (0, 0.0)
                    else:
                        # Its score is only needed if it is woken: its leaf's attainment
                        # now is kept for it (`_start_score`).
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
            # Every group stays parked: the holds would only last until the end of the cycle.
            return res
        heapq.heapify(heap)
        # Parked groups that could preempt: an admission later in this cycle may give them
        # new victims, and then they are tried after it (with their start-of-cycle key).
        preemptors: list[tuple[tuple[object, ...], Group]] = []
        for g in parked:
            if g.preempts:
                head = g.members[0]
                rank = base[id(g)] = self._rank(head, now, repay_cache)
                preemptors.append((self._order_key(head, rank, cutoff), g))
        held: dict[str, str] = {}
        # Groups whose member failed in this cycle while the next one may not fail the same
        # way: gid -> (state stamp at that failure (`_stamp`), the failed one starved). The next
        # member's turn is in the heap (its group stays parked unless it is tried).
        recheck: dict[int, tuple[tuple[int, int, int], bool]] = {}
        # A full evaluation re-ranks each within-guarantee workload when its own turn comes
        # (below): once a group's member was found to borrow now, each later member is
        # re-ranked at its own within-guarantee turn too. Ranks change only when the state
        # does (an admission or a hold): before each evaluation or hold, such a group records
        # the key reached and its rank then (`_checkpoint`); a member's rank is the one at the
        # first checkpoint after its within-guarantee turn. `marks`: group -> (a member, its
        # checkpoints [key, rank, state stamp]); `by_top`: the same per top-level queue (an
        # evaluation or hold changes only its own top-level queue's usage, which is all a
        # rank depends on).
        marks: dict[int, tuple[Pending, list[list[object]]]] = {}
        by_top: dict[int, list[tuple[Pending, list[list[object]]]]] = {}
        chain = self.tree.chain

        def next_key(g: Group, gid: int, q: Pending) -> tuple[object, ...]:
            rank = base[gid]
            m = marks.get(gid)
            if m is not None:
                turn = self._order_key(q, rank, cutoff)
                points = m[1]
                i = bisect.bisect_right(points, turn, key=lambda c: c[0])  # type: ignore
                got = points[i][1] if i < len(points) else self._rank(q, now, repay_cache)
                rank = got  # type: ignore[assignment]
            return self._order_key(q, rank, cutoff)

        def checkpoint(key: tuple[object, ...], leaf: int) -> None:
            stamp = (self.changes, len(self._holds))
            for q, points in by_top.get(chain[leaf][0], ()):
                if points and points[-1][2] == stamp:
                    points[-1][0] = key
                else:
                    points.append([key, self._rank(q, now, repay_cache), stamp])

        while heap:
            key, gid, g = heapq.heappop(heap)
            if gid in hold_only:
                hold_only.discard(gid)
                # Only an admission in this cycle can have woken it since the start, or, for a
                # group held back by starving workloads' holds in its last cycle, a holder
                # that does not hold again (it was admitted, or holds no more).
                if ((not g.held_by or set(held.values()).issuperset(g.held_by))
                        and (not res.admitted or not self._wakes(g, now))):
                    head = g.members[0]
                    if head.flavors and head.flavors[0] not in held:
                        held[head.flavors[0]] = head.name
                        if marks:
                            checkpoint(key, head.leaf)
                        self._hold(head, head.flavors[0])
                    continue
                # An admission earlier in this cycle gave it new victims: try it.
                self._unpark(g)
                if base[gid][0] == 1:
                    head = g.members[0]
                    base[gid] = (1, self._score(head.leaf, start_att[(head.leaf, head.gpu_key)],
                                                now, repay_cache))
            if gid in conditional:
                conditional.discard(gid)
                holders = set(held.values())
                if holders.issuperset(g.held_by) and (not res.admitted
                                                      or not self._wakes(g, now)):
                    continue
                self._unpark(g)
            if gid in recheck and not g.parked:
                del recheck[gid]
                continue
            p = g.members[g.pos]
            if key[0] == 0 and not (key[1] == 2 and key[3] == 0.0):
                rank = self._rank(p, now, repay_cache)
                if rank[0] == 1:
                    # Earlier admissions of this cycle used its guarantee: it would borrow now,
                    # so it goes behind the within-guarantee work (Kueue re-checks the mode).
                    heapq.heappush(heap, (self._order_key(p, rank, cutoff), gid, g))
                    if g.pos + 1 < len(g.members) and gid not in marks:
                        mark: tuple[Pending, list[list[object]]] = (p, [])
                        marks[gid] = mark
                        by_top.setdefault(chain[p.leaf][0], []).append(mark)
                    continue
            if gid in recheck:
                # The next member's turn (a full evaluation tries it here). With nothing
                # admitted, preempted or held since the failure it fails the same way (and
                # holds the same way, unless it starves and the failed one did not); else
                # (new victims, or a grace victim that no longer makes it wait on one flavor
                # so it goes on to the next) it is tried.
                stamp, was_starving = recheck.pop(gid)
                if stamp == self._stamp(res) and (
                        was_starving or key[0] == -1 or p.spec.submitted_at >= cutoff):
                    continue
                g.parked = False
            starving = key[0] != -1 and p.spec.submitted_at < cutoff
            if (key[0] == 1 and not starving and not full and g.code in QUOTA_CODES
                    and self._same_quota_failure(p, g.code)):
                # Fails the quota on every flavor exactly as when it was parked (the fleet is
                # unchanged): park it again without rebuilding its reason (the members were
                # given it; a new member would have woken the full path).
                self._park(g, p, now)
                outcome = FAILED
            else:
                n_held = len(held)
                if marks:
                    checkpoint(key, p.leaf)
                outcome, reason, per_flavor = self._consider(p, now, starving, res, held)
                if (outcome == FAILED and len(held) > n_held
                        and g.pos + 1 < len(g.members)):
                    # Its hold, taken just now, changes what the next identical member sees
                    # (that one may go on to its other flavors): it keeps its own reason and
                    # the next member is tried.
                    assert reason is not None
                    code = str(reason.code)
                    if p.last_code != code:
                        res.reasons[p.name] = reason
                        p.last_code = code
                    g.unreported.discard(p.name)
                    g.pos += 1
                    outcome = WAITING
                elif outcome == ADMITTED:
                    g.members.pop(g.pos)
                    g.shifted = True
                    g.unreported.discard(p.name)
                    p.group = None
                    if preemptors:
                        preemptors = self._wake_preemptors(preemptors, key, heap, now)
                elif outcome == FAILED:
                    assert reason is not None
                    self._fail(g, reason, per_flavor, now, res, held)
                    if g.pos + 1 < len(g.members) and (
                            p.spec.can_preempt or g.reclaims
                            or (not starving and g.members[g.pos + 1].spec.submitted_at
                                < cutoff)):
                        # Within a cycle usage only grows, but the next identical member may
                        # still preempt where this one did not, or hold where it did not.
                        recheck[gid] = (self._stamp(res), starving)
                        g.pos += 1
                        heapq.heappush(heap, (next_key(g, gid, g.members[g.pos]), gid, g))
                else:
                    g.unreported.add(p.name)
                    g.pos += 1
            if outcome != FAILED and g.pos < len(g.members):
                heapq.heappush(heap, (next_key(g, gid, g.members[g.pos]), gid, g))
                continue
            if not g.members:
                del self.groups[g.sig]
        self._release_holds()
        return res

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

    def _stamp(self, res: CycleResult) -> tuple[int, int, int]:
        """What a preemptor's outcome can depend on that changes within a cycle: admissions,
        preemptions, holds."""
        return (self.changes, len(res.preempted), len(self._holds))

    def _wake_preemptors(self, preemptors: list[tuple[tuple[object, ...], Group]],
                         key: tuple[object, ...],
                         heap: list[tuple[tuple[object, ...], int, Group]],
                         now: float) -> list[tuple[tuple[object, ...], Group]]:
        """After an admission: parked preemptors behind it in the order that now have new
        victims are tried in this cycle (a full evaluation would reach them after it)."""
        rest = []
        for k, g in preemptors:
            if not g.parked or not g.members:
                continue
            if k > key and self._wakes(g, now):
                self._unpark(g)
                heapq.heappush(heap, (k, id(g), g))
            else:
                rest.append((k, g))
        return rest

    def _unpark(self, g: Group) -> None:
        g.parked = False
        g.pos = 0
        g.violating = False
        g.held_by = ()

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
                        free[r] = free.get(r, 0) + pool.fg[i]
                    racks = sorted((r for r in total if total[r] >= need),
                                   key=lambda r: (-free[r], r))
                    order = sorted((i for i in ready if racks and pool.rack[i] == racks[0]),
                                   key=lambda i: (-pool.fg[i], i))
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

    def _release_holds(self) -> None:
        """End of cycle: give back held quota and nodes. Not counted as freed: groups parked
        while a hold was in place computed their deficits without it, and groups held back by
        a hold wait for their holders (`cycle`)."""
        for p, _, d, masked in reversed(self._holds):
            self.tree.add(p.leaf, d, -1.0)
            for pool, i in masked:
                pool.set_ready(i, True)
        self._holds.clear()
        self.phantom.clear()

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

    def _same_quota_failure(self, p: Pending, code: str) -> bool:
        """A borrower (preemptible, not preempting) that fits the quota on none of its flavors,
        whose first flavor fails with `code`, with nothing of it to report."""
        if (p.spec.can_preempt or not p.spec.preemptible or not p.flavors
                or p.name in self.waiting or p.group is None or p.group.unreported):
            return False
        # Its reason is the one it would get with every hold lifted (real numbers).
        real = self.real
        return (not any(real.fits(p.leaf, p.demand[f]) for f in p.flavors)
                and str(real.quota_code(p.leaf, p.demand[p.flavors[0]])) == code)

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

    def _fail(self, g: Group, reason: Reason, per_flavor: dict[str, Reason], now: float,
              res: CycleResult, held: dict[str, str]) -> None:
        """Give the group's remaining members the reason and park it until something helps."""
        members = g.members
        code = str(reason.code)
        # The members nearest admission get every change of reason; deeper ones keep the
        # reason they were given until they move up (so a reason that flips cycle after cycle
        # costs O(REFRESH) per cycle, not O(members)). New members always get one.
        if code != g.code or g.shifted or g.pos:
            # (Otherwise the same members got this code at the last failure.)
            for i in range(g.pos, min(len(members), g.pos + REFRESH)):
                m = members[i]
                if m.last_code != code:
                    res.reasons[m.name] = reason
                    m.last_code = code
                    g.unreported.discard(m.name)
            g.shifted = False
        if g.unreported:
            # Members waiting for their victims keep their WAITING_FOR_PREEMPTION reason.
            for name in [n for n in g.unreported if n not in self.waiting]:
                g.unreported.discard(name)
                m = self.pending[name]
                if m.last_code != code:
                    res.reasons[name] = reason
                    m.last_code = code
        g.code = code
        g.reason = reason
        p = members[g.pos]
        r0 = per_flavor.get(p.flavors[0], reason) if p.flavors else reason
        g.holds = bool(p.flavors) and r0.code != RC.COOLDOWN and not (
            r0.code == RC.QUOTA_MAX and "lowered by policy" in r0.message)
        tree = self.tree
        g.violating = False
        if p.flavors and reason.code != RC.WAITING_FOR_PREEMPTION and p.name not in self.waiting:
            d0 = p.demand[p.flavors[0]]
            if d0 and tree.within_guarantee(p.leaf, d0) and any(
                    tree.u[p.leaf][k] - self.phantom.get((p.leaf, k), 0.0)
                    < tree.mn[p.leaf][k] - EPS for k, _ in d0):
                g.violating = self.fits_if_borrowed_returned(p.name)
        g.held_by = ()
        if reason.code == RC.NO_CAPACITY and ": capacity held for starving" in reason.message:
            # Parked like any failure, and also tried again as soon as a holder does not
            # hold again (see `cycle`).
            g.held_by = self._held_by(p)
        self._park(g, p, now)
        if not g.held_by and self._holds and (p.spec.can_preempt or g.reclaims):
            # A preemptor: a hold on its flavors may be what kept its preemption from
            # making it fit (its reason only says why it does not fit without victims), so it
            # is held back by those holders too.
            g.held_by = self._held_by(p)

    def _park(self, g: Group, p: Pending, now: float) -> None:
        """Park a group whose head p failed: what could change the outcome, seen from now.
        Deficits are counted without the holds of this cycle (they end with it: on `real`),
        except for a group held back by a hold, which is tried again when its holders stop
        holding."""
        self._park_deficits(g, p, now, self.tree if g.held_by else self.real)

    def _park_deficits(self, g: Group, p: Pending, now: float, tree: QuotaTree) -> None:
        g.park = {}
        g.preempts = {}
        g.reclaims = False
        g.retry_at = INF
        cool = self.cooldown.get(p.leaf, -INF)
        if cool > now + EPS:
            g.retry_at = cool
        leaf = p.leaf
        can_preempt = p.spec.can_preempt
        freed = self.freed
        g.top_seen = -1
        watch: list[list[tuple[int, float, float]]] = []
        g.wg_watch = watch
        top_watch = False
        for f in p.flavors:
            d = p.demand[f]
            deficit: Demand = []
            within = tree.within_guarantee(leaf, d)
            if not (within or can_preempt):
                for k, amount in d:
                    short = amount - tree.available_raw(leaf, k)
                    if short > EPS:
                        deficit.append((k, short))
                if d and not top_watch:
                    # Usage going down in its subtree may bring it within its guarantee on
                    # f, where it reclaims: at its leaf, first by what it uses beyond its min
                    # with this demand; if the leaf is not what stops it, by any end.
                    mn, u = tree.mn[leaf], tree.u[leaf]
                    if all(amount <= mn[k] + EPS for k, amount in d):
                        beyond = [(k, u[k] + amount - mn[k],
                                   self.leaf_freed.get((leaf, k), 0.0))
                                  for k, amount in d if u[k] + amount > mn[k] + EPS]
                        if beyond:
                            watch.append(beyond)
                        else:
                            top_watch = True
                            g.top = tree.chain[leaf][0]
                            g.top_seen = self.top_ends.get(g.top, 0)
            # A group that may preempt on f (reclaim within its guarantee, or priority) needs
            # less freed than its deficit once its victims count: any freeing on f can let its
            # preemption through (an empty deficit wakes it at the next free event on f).
            g.park[f] = (self.free_events.get(f, 0),
                         {k: freed.get(k, 0.0) for k, _ in deficit} if deficit else {},
                         deficit)
            if within:
                g.preempts[f] = self.admits.get(f, 0)
                g.reclaims = True
        if can_preempt:
            g.preempts[""] = self.leaf_admits.get(leaf, 0)
        if p.cpu_only:
            # A GPU pod taking a free GPU releases the cores reserved for it: CPU-only work
            # on GPU nodes may fit after any admission there.
            for f in p.flavors:
                g.preempts["any:" + f] = self.all_admits.get(f, 0)
        g.quiet = -1
        g.parked = True

    def _wakes(self, g: Group, now: float) -> bool:
        """Could the parked group fit now? (conservative: True when unsure)."""
        if now + EPS >= g.retry_at:
            return True
        if g.quiet == self.changes:
            # Nothing admitted or ended since its conditions last did not hold.
            return False
        for f, seen in g.preempts.items():
            if f == "":
                if self.leaf_admits.get(g.members[0].leaf, 0) != seen:
                    return True
            elif f.startswith("any:"):
                if self.all_admits.get(f[4:], 0) != seen:
                    return True
            elif self.admits.get(f, 0) != seen:
                return True
        if g.top_seen >= 0 and self.top_ends.get(g.top, 0) != g.top_seen:
            return True
        if g.wg_watch:
            leaf_freed, leaf = self.leaf_freed, g.members[0].leaf
            for beyond in g.wg_watch:
                for k, amount, was in beyond:
                    if leaf_freed.get((leaf, k), 0.0) - was + EPS < amount:
                        break
                else:
                    return True
        free_events, freed = self.free_events, self.freed
        for f, (events, snap, deficit) in g.park.items():
            if free_events.get(f, 0) == events:
                continue
            for k, short in deficit:
                if freed.get(k, 0.0) - snap[k] + EPS < short:
                    break
            else:
                return True
        g.quiet = self.changes
        return False

    def violating_leaves(self) -> set[str]:
        """Leaves whose guarantee is blocked by borrowed work, after this cycle: a pending
        workload of the leaf is within guarantee on its first flavor, the leaf uses less than
        its min, no reclaim is under way for it, it does not fit, and it would fit if every
        other leaf gave back what it borrows (the runner's min_guarantee_violation_s counts
        how long this lasts beyond one grace period and one cycle)."""
        tree = self.tree
        out: set[str] = set()
        for g in self.groups.values():
            if not g.violating or not g.members:
                continue
            p = g.members[0]
            if p.name in self.waiting:
                continue
            d0 = p.demand[p.flavors[0]]
            if any(tree.u[p.leaf][k] < tree.mn[p.leaf][k] - EPS for k, _ in d0):
                out.add(tree.paths[p.leaf])
        return out

    def violating(self) -> bool:
        """Some leaf's guarantee is blocked by borrowed work (see `violating_leaves`)."""
        return bool(self.violating_leaves())

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
        flav = p.flavors
        waiting = name in self.waiting
        tree = self.tree
        leaf = p.leaf
        demand = p.demand
        if (self._holds and not waiting and p.spec.preemptible and not p.spec.can_preempt
                and self.cooldown.get(leaf, -INF) <= now + EPS
                and not any(tree.within_guarantee(leaf, demand[f]) or tree.fits(leaf, demand[f])
                            for f in flav)):
            # With holds in place: it would borrow on every flavor, fits the quota on none
            # and has nothing to preempt, so the loops below would only collect quota
            # failures, and of those only its first flavor's is used (here and `_fail`).
            f0 = flav[0]
            reason = (self.fleet.flavor_problem(f0, p.spec.allowed_clusters)
                      or tree.quota_reason_brief(leaf, demand[f0]))
            assert reason is not None
            reasons[f0] = reason
            outcome = FAILED
            r0 = reason
        else:
            outcome, reason = self._evaluate(p, now, res, reasons, waiting)
            if outcome in (ADMITTED, PREEMPTING):
                return outcome, None, reasons
            assert reason is not None
            r0 = reasons.get(flav[0], reason)
        if outcome == FAILED and self._holds:
            plain = self._unheld_reason(p, now)
            holders, held_reason = self._holders(p)
            if plain is None:
                reason = held_reason or Reason(RC.NO_CAPACITY, (
                    f"flavor {flav[0]}: capacity held for starving workload "
                    f"{next(iter(held.values()))}"))
            elif reason.code != RC.BUDGET_EXCEEDED:
                reason = plain
                if holders and plain.code in (RC.NO_CAPACITY, RC.QUOTA_BORROW_UNAVAILABLE):
                    reason = Reason(plain.code, (
                        f"{plain.message}; capacity also held for starving workload {holders}"))
        if starving and flav[0] not in held and r0.code != RC.COOLDOWN and not (
                r0.code == RC.QUOTA_MAX and "lowered by policy" in r0.message):
            held[flav[0]] = name
            self._hold(p, flav[0])
        if outcome == WAITING:
            res.reasons[name] = reason
        return outcome, reason, reasons

    def _evaluate(self, p: Pending, now: float, res: CycleResult, reasons: dict[str, Reason],
                  waiting: bool) -> tuple[int, Reason | None]:
        """`_consider`'s tries: admit (ADMITTED), preempt (PREEMPTING), else the outcome and
        its reason before the holds are taken into account (per flavor in `reasons`)."""
        name = p.name
        flav = p.flavors
        tree = self.tree
        leaf = p.leaf
        wg = {f: tree.within_guarantee(leaf, p.demand[f]) for f in flav}
        for f in flav:
            if wg[f]:
                r = self._try(p, f, False, now, res)
                if r is None:
                    return ADMITTED, None
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
                if not tree.fits(leaf, d):
                    # Name what would block it anyway: the reason then does not flip each
                    # time a cooldown starts or ends.
                    reasons[f] = (self.fleet.flavor_problem(f, p.spec.allowed_clusters)
                                  or (tree.quota_reason_brief(leaf, d) if self._holds
                                      else tree.quota_reason(leaf, d))
                                  or Reason(RC.QUOTA_BORROW_UNAVAILABLE, "no room"))
                    continue
                placed = self._place(p, f, commit=False, brief=bool(self._holds))
                if isinstance(placed, Reason):
                    reasons[f] = placed
                    continue
                reasons[f] = Reason(RC.COOLDOWN, (
                    f"queue {tree.paths[leaf]}: a workload was reclaimed; no borrowing "
                    f"admissions until {fmt(cool)} (reclaim_cooldown_s "
                    f"{fmt(self.settings.reclaim_cooldown_s)})"))
                continue
            r = self._try(p, f, True, now, res)
            if r is None:
                return ADMITTED, None
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
                        return PREEMPTING, None
                    if got.code in (RC.BUDGET_EXCEEDED, RC.WAITING_FOR_PREEMPTION):
                        reason = got
                        break
        return outcome, reason

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
        if self._holds:
            # With holds in place a failure's reason is the one it has without them
            # (`_consider`): this one only needs its code (and whether a policy lowered the
            # max). An absent or unhealthy flavor explains more than the quota numbers do.
            brief = self.tree.quota_reason_brief(p.leaf, d)
            if brief is not None:
                return self.fleet.flavor_problem(f, p.spec.allowed_clusters) or brief
        elif not self.tree.fits(p.leaf, d):
            return (self.fleet.flavor_problem(f, p.spec.allowed_clusters)
                    or self.tree.quota_reason(p.leaf, d))
        got = self._place(p, f, commit=True, brief=bool(self._holds))
        if isinstance(got, Reason):
            return got
        cluster, nodes = got
        self.tree.add(p.leaf, d)
        self.real.add(p.leaf, d)
        self.changes += 1
        self.seq += 1
        pool = self.fleet.by_name[cluster].pools[f]
        names = tuple(pool.names[i] for i in nodes)
        a = Admitted(p.spec, p.leaf, f, cluster, nodes, names, p.pods, d, borrowed, now,
                     self.seq)
        self._index_admitted(a)
        tree = self.tree
        if borrowed or any(tree.u[n][k] > tree.mn[n][k] + EPS
                           for n in tree.chain[p.leaf] for k, _ in d):
            # New reclaim victims: it borrows, or its queue or an ancestor is over its min
            # (a parent pushed over its min makes its children's work reclaimable).
            self.admits[f] = self.admits.get(f, 0) + 1
        self.leaf_admits[p.leaf] = self.leaf_admits.get(p.leaf, 0) + 1
        self.all_admits[f] = self.all_admits.get(f, 0) + 1
        del self.pending[p.name]
        self.waiting.pop(p.name, None)
        g = sum(x[0] for x in p.pods)
        res.admitted.append(Admit(p.name, cluster, f, names, borrowed, g,
                                  sum(x[1] for x in p.pods), sum(x[2] for x in p.pods)))
        return None
