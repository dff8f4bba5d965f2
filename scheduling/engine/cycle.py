"""One admission cycle (QUOTA-SEMANTICS.md §4): pods-ready timeouts and backoffs, then the
candidate order walked group by group, each group's members tried in turn until one fails.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import replace

from scheduling.engine.accounting import EPS, fmt
from scheduling.engine.admission import AdmissionMixin
from scheduling.engine.ordering import OrderingMixin, Turns
from scheduling.engine.parking import QUOTA_CODES
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
from scheduling.engine.types import CycleResult, Reason, Release


class CycleMixin(AdmissionMixin, OrderingMixin):
    """One admission cycle over the engine's state."""

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
        turns = self._order(now, res)
        if turns is None:
            # Every group stays parked: the holds would only last until the end of the cycle.
            return res
        self._walk(now, res, turns)
        self._release_holds()
        self._free_deferred()
        self._after_claims()
        return res

    def _after_claims(self) -> None:
        """End of cycle: a preemptor that had its first turn in it (`_consider`) and still
        waits is an ordinary member of its group again: it goes behind the members still owed
        theirs, to its place in the group's order, as in a group rebuilt from a snapshot
        (`_join`, then `_claim` for the nominations left). Left at the front, it kept the
        group at its ordinary place in the order, and the claims behind it, alike and so not
        tried once it failed, never had their turn: their nominations never ended, unlike in
        the workers' engine rebuilt every cycle (docs/engine.md §13, the replay's forecast)."""
        turned, self._turned = self._turned, []
        claims = self.claims
        for p in turned:
            g = p.group
            if g is None or p.name in claims or self.pending.get(p.name) is not p:
                continue
            members = g.members
            try:
                i = members.index(p)
            except ValueError:
                continue
            members.pop(i)
            if g.place(p, claims) != i:
                g.parked = False
                g.shifted = True

    def _walk(self, now: float, res: CycleResult, turns: Turns) -> None:
        """Walk the cycle's order (§4.3): pop the next group, try its member whose turn it is,
        push the group back with its next member's key unless it is done or parked. Groups
        parked at the start take their turn to hold, or to wait for their holders, unless this
        cycle woke them.

        Kept in one piece: its body runs for every turn in the order (on the Philly trace more
        than twice per evaluation), and moving it into methods (a parked group's hold turn, a
        member's try and the group's bookkeeping after it, the re-rank closures as methods
        over per-cycle state) cost 1.6% more instructions on the replay of the first 5,000
        Philly jobs, elastic (cachegrind: 11.54 G against 11.36 G)."""
        heap, base, hold_only, start_att, conditional, preemptors, cutoff, full, repay_cache = \
            turns
        held: dict[str, str] = {}
        # Groups whose member failed in this cycle while the next one may not fail the same
        # way: gid -> (state stamp at that failure (`_stamp`), the failed one starved). The next
        # member's turn is in the heap (its group stays parked unless it is tried).
        recheck: dict[int, tuple[tuple[int, int, int], bool]] = {}
        # A full evaluation re-ranks each within-guarantee workload when its own turn comes
        # (below): once a group's member was found to borrow now, each later member is
        # re-ranked at its own within-guarantee turn too. Ranks change only when the state
        # does (an admission or a hold): before each evaluation or hold, such a group records
        # the key reached and its rank then (`checkpoint`); a member's rank is the one at the
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
                # Only an admission or a preemption in this cycle can have woken it since the
                # start, or, for a group held back by starving workloads' holds in its last
                # cycle, a holder that does not hold again (it was admitted, or holds no more).
                if ((not g.held_by or set(held.values()).issuperset(g.held_by))
                        and (not (res.admitted or res.preempted) or not self._wakes(g, now))):
                    head = g.members[0]
                    # (Not when a reclaim earlier in this cycle began its queue's cooldown: a
                    # full evaluation would find it cooling and not hold.)
                    if (head.flavors and head.flavors[0] not in held and g.reason is not None
                            and self._may_hold(head, g.reason, now)):
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
                if holders.issuperset(g.held_by) and (not (res.admitted or res.preempted)
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
                # Whether it holds once it starves, as its turn would find now (a cooldown
                # that kept it from holding at its last turn may have ended since).
                g.holds = self._may_hold(p, g.reason, now) if g.reason else True
                if self._holds and g.reclaims:
                    # Within its guarantee but for the holds' phantom usage: held back by
                    # them, as `_fail` has it, and tried again when they do not all hold.
                    g.held_by = self._held_by(p)
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
                    if outcome == PREEMPTING and preemptors:
                        # Its victims are no victims for the others any more.
                        preemptors = self._wake_preemptors(preemptors, key, heap, now)
            if outcome != FAILED and g.pos < len(g.members):
                heapq.heappush(heap, (next_key(g, gid, g.members[g.pos]), gid, g))
                continue
            if not g.members:
                del self.groups[g.sig]


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

    def _timeout(self, a: Admitted, now: float, res: CycleResult) -> None:
        """Its pods did not all run in time: released, and back in the queue after a backoff."""
        s = self.settings
        self.end(a.name, now)
        n = a.spec.backoff_count + 1
        until = now + backoff_delay(s, n)
        reason = Reason(RC.PODS_READY_TIMEOUT, (
            f"pods not all running {fmt(s.pods_ready_timeout_s)} s after admission to "
            f"{a.cluster}; retry #{n} after {fmt(until - now)} s backoff"))
        res.released.append(Release(a.name, reason, until, n))
        self.submit(replace(a.spec, not_before=until, backoff_count=n))
