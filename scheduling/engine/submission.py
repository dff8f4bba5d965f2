"""What enters the pending set (QUOTA-SEMANTICS.md §4.7): the checks at submission, what a
request's queue and pod sets determine, and the groups of identical pending workloads.

Choices where the semantics page is silent:
- Flavors: a workload whose pod sets ask no GPU tries CPU-only flavors before GPU flavors
  ("CPU work on GPU nodes only after the cpu nodes are full").
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from scheduling.engine.accounting import EPS, Demand, fmt
from scheduling.engine.fragmentation import MILLI, to_milli
from scheduling.engine.pool import Pod, is_fraction
from scheduling.engine.state import (
    RC,
    EngineBase,
    Group,
    Pending,
    expand_pods,
    pods_text,
)
from scheduling.engine.types import Reason, WorkloadSpec


def gpus_problems(gpus: float, gpu_memory_gib: float | None) -> list[str]:
    """What is wrong with a pod's GPU request (QUOTA-SEMANTICS.md §10): a whole number of
    cards, or a fraction 0 < f < 1 in steps of 0.001 with a positive memory slice."""
    g = float(gpus)
    out: list[str] = []
    if g < 0:
        return out  # (said by the caller: "< 0")
    if g >= 1 and not g.is_integer():
        out.append(f"gpus {fmt(g)}: more than one card must be a whole number of cards")
    elif is_fraction(g) and abs(g * MILLI - round(g * MILLI)) > 1e-6:
        out.append(f"gpus {g!r}: a fraction of a card is in steps of 0.001")
    elif is_fraction(g) and to_milli(g) == 0:
        out.append(f"gpus {g!r}: a fraction of a card is at least 0.001")
    if gpu_memory_gib is not None and gpu_memory_gib < 0:
        out.append(f"gpu_memory_gib {fmt(gpu_memory_gib)} < 0")
    return out


class SubmissionMixin(EngineBase):
    """Checks, shapes and groups of pending workloads (part of `Engine`)."""

    def _demand(self, flavor: str, pods: Sequence[Pod]) -> Demand:
        g = sum(p[0] for p in pods)
        c = sum(p[1] for p in pods)
        m = sum(p[2] for p in pods)
        amounts: list[tuple[str, float]] = [("gpu", g), ("cpu", c), ("memory", m)]
        for p in pods:
            if len(p) > 5:
                amounts.extend(p[5])
        if len(amounts) > 3:  # extended resources: summed per name
            summed: dict[str, float] = {}
            for res, amount in amounts:
                summed[res] = summed.get(res, 0.0) + amount
            amounts = list(summed.items())
        return self.tree.demand(flavor, amounts)

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
            if not any(r.code in (RC.FLAVOR_UNAVAILABLE, RC.GPU_MEMORY_INSUFFICIENT)
                       for r in reasons):
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
            out.extend(f"pod set {i}: {m}" for m in gpus_problems(ps.gpus, ps.gpu_memory_gib))
            for res, amount in ps.resources:
                if amount < 0:
                    out.append(f"pod set {i}: {res} {fmt(amount)} < 0")
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
                if mem is not None and ps.gpu_memory_gib > mem + EPS and is_fraction(ps.gpus):
                    return [Reason(RC.GPU_MEMORY_INSUFFICIENT,
                                   f"flavor {f}: pod set {i} asks {fmt(ps.gpus)} of a card with "
                                   f"{fmt(ps.gpu_memory_gib)} GiB of its memory > "
                                   f"{fmt(mem)} GiB per card")]
                if mem is not None and ps.gpu_memory_gib > mem + EPS:
                    return [Reason(RC.GPU_MEMORY_INSUFFICIENT,
                                   f"flavor {f}: pod set {i} asks {fmt(ps.gpu_memory_gib)} GiB "
                                   f"per GPU > {fmt(mem)} GiB per card")]
        if f not in self.fleet.flavor_clusters:
            return [Reason(RC.FLAVOR_UNAVAILABLE, f"flavor {f}: no cluster has {f} nodes")]
        advertised = self.fleet.flavor_resources.get(f, set())
        for i, ps in enumerate(w.pod_sets):
            for res, amount in ps.resources:
                if amount > 0 and res not in advertised:
                    return [Reason(RC.FLAVOR_UNAVAILABLE,
                                   f"flavor {f}: pod set {i} asks {res} {fmt(amount)}; no {f} "
                                   f"node advertises {res}")]
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
            g = fmt(sum(p[0] for p in pods))
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

    def record_mix(self, w: WorkloadSpec) -> None:
        """Count the workload's GPU pods in the recent mix of its flavors (what
        fragmentation-aware placement reads)."""
        mixes = self.fleet.mixes
        for ps in w.pod_sets:
            g = float(ps.gpus)
            if g <= 0:
                continue
            gmem = ps.gpu_memory_gib if is_fraction(g) and ps.gpu_memory_gib is not None else -1.0
            shape = (to_milli(g) if is_fraction(g) else int(g) * MILLI, float(ps.cpu),
                     float(ps.memory_gib), float(gmem))
            for f in ps.flavors:
                mix = mixes.get(f)
                if mix is not None:
                    for _ in range(min(int(ps.count), 64)):
                        mix.record(shape)

    def submit(self, w: WorkloadSpec) -> None:
        """Add a pending workload (checked by `check` beforehand if the caller wants)."""
        self.record_mix(w)
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
            g.place(p, self.claims)
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
        self._denominate(name, None)

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
