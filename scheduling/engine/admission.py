"""Trying one workload (QUOTA-SEMANTICS.md §4.3-§4.5): its flavors in order, within guarantee
first, then borrowing; admit (quota, then placement), else preempt for it, else say why it
waits.

Choices where the semantics page is silent:
- A preemptor whose victims are still in their grace period does not preempt again; it waits
  (WAITING_FOR_PREEMPTION), and is still admitted if it fits elsewhere meanwhile (its
  nomination then ends, `nomination`).
"""

from __future__ import annotations

from scheduling.engine.accounting import EPS, INF, fmt
from scheduling.engine.holds import HoldsMixin
from scheduling.engine.pool import cards_of
from scheduling.engine.state import ADMITTED, FAILED, PREEMPTING, RC, WAITING, Admitted, Pending
from scheduling.engine.types import Admit, CycleResult, Reason


class AdmissionMixin(HoldsMixin):
    """One workload's turn in the cycle."""

    def _consider(self, p: Pending, now: float, starving: bool, res: CycleResult,
                  held: dict[str, str]) -> tuple[int, Reason | None, dict[str, Reason]]:
        """Try one workload: admit, preempt for it, or say why it waits."""
        name = p.name
        if name in self.claims:
            # Its first turn: after the cycle an ordinary member of its group (`_after_claims`).
            self.claims.discard(name)
            self._turned.append(p)
        if name in self.nominations and name not in self.waiting:
            # Its first turn since its victims ended: its nomination has done its work.
            self._denominate(name, res)
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
        p.may_hold = self._may_hold(p, r0, now)
        if starving and flav[0] not in held and p.may_hold:
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
        placed = pool.placed if p.fractional else p.pods
        a = Admitted(p.spec, p.leaf, f, cluster, nodes, names, placed, d, borrowed, now,
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
        if p.name in self.nominations:
            self._denominate(p.name, res)
        g = sum(x[0] for x in p.pods)
        res.admitted.append(Admit(p.name, cluster, f, names, borrowed, g,
                                  sum(x[1] for x in p.pods), sum(x[2] for x in p.pods),
                                  cards_of(placed)))
        return None

    def _waiting_reason(self, name: str, now: float) -> Reason:
        victims = sorted(self.waiting.get(name, ()))
        until = max((self.admitted[v].grace_until or now for v in victims if v in self.admitted),
                    default=now)
        return Reason(RC.WAITING_FOR_PREEMPTION, (
            f"waiting for {', '.join(victims)} to stop (grace until {fmt(until)})"))
