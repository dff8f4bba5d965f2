"""Parking (QUOTA-SEMANTICS.md §4.3-§4.4): pending workloads identical for admission form a
group; a group whose member fails is parked with what could change that, and cycles skip it
until then. Its members get the failure's reason.

Choices where the semantics page is silent:
- Within one cycle usage only grows (victims keep their capacity until their grace ends), so a
  workload identical in queue, shape and options to one that already failed in this cycle fails
  the same way without new checks.
"""

from __future__ import annotations

from scheduling.engine.accounting import EPS, INF, Demand, QuotaTree
from scheduling.engine.holds import HoldsMixin
from scheduling.engine.state import RC, Group, Pending
from scheduling.engine.types import CycleResult, Reason

REFRESH = 50  # group members whose reasons follow every change
QUOTA_CODES = frozenset({str(RC.QUOTA_MAX), str(RC.QUOTA_BORROW_UNAVAILABLE), str(RC.NO_CAPACITY)})


class ParkingMixin(HoldsMixin):
    """Failed groups set aside until they could fit, and the guarantee violations they show."""

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
        g.holds = p.may_hold  # (as its turn in `_consider` found, before its own hold)
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
            # hold again (see `CycleMixin._walk`).
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

    def _unpark(self, g: Group) -> None:
        g.parked = False
        g.pos = 0
        g.violating = False
        g.held_by = ()

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
