"""Nominations (QUOTA-SEMANTICS.md §5): the capacity a preemption frees goes to the workload
it was made for, like Kubernetes' nominatedNodeName.

A preemptor P is nominated when its victims are chosen: the flavor and, per victim, its leaf,
cluster, nodes and pods. Until all of P's victims have ended:
- P does not choose new victims (it waits, `AdmissionMixin._evaluate`);
- a victim that ends early (a shorter grace, finished, cancelled, its node gone) does not free
  its capacity: it stays counted, on its leaf and its nodes, as while it was in grace, and is
  held for P, so no other workload can take part of what P's preemption was planned on.
When the last victim ends, everything held is freed at once and P goes first in the next cycle
(before starving work and every other class: the capacity was taken for it). P's nomination
ends when it is admitted (there or elsewhere; what is held is then freed), when it leaves
(cancelled), or after that first turn: if it did not fit then, it is an ordinary pending
workload again and may preempt anew.

The workers rebuild the engine from the database every cycle: a nomination is reported in
`CycleResult.nominations` when it begins or ends, stored on the preemptor, and given back in
`Snapshot.nominations`; `renominate` rebuilds from it what the live engine kept (victims still
in grace, capacity held for ended ones, or the first turn owed), so both decide the same.

Choices where the semantics page is silent:
- What an ended victim holds for its preemptor is the whole of its capacity (quota on its leaf,
  pods on its nodes), not only the part the preemptor needs: the victim set is minimal, so all
  of it was needed when it was chosen.
- Held capacity is not a victim candidate (its owner is gone) and is not shown to other
  workloads as capacity being freed (WAITING_FOR_PREEMPTION names only victims in grace).
"""

from __future__ import annotations

from typing import Any

from scheduling.engine.pool import Pod, as_pod, is_fraction
from scheduling.engine.state import Admitted, EngineBase, expand_pods
from scheduling.engine.types import CycleResult, NominatedVictim, Nomination, WorkloadSpec


def _stored(pod: Pod) -> tuple[Any, ...]:
    """A victim's pod as a nomination keeps it: GPUs, CPU, memory, and for a fraction its
    memory slice and card, and then its extended resources if it asks any."""
    return pod if is_fraction(pod[0]) or len(pod) > 5 else pod[:3]


class NominationMixin(EngineBase):
    """Nominations made, held capacity kept and given back, and their state per snapshot."""

    def _nominate(self, name: str, flavor: str, victims: list[Admitted], now: float,
                  res: CycleResult) -> None:
        """`name` preempted `victims` on `flavor`: it is nominated for what they free."""
        nom = Nomination(flavor=flavor, at=now, victims=tuple(
            NominatedVictim(name=a.name, queue=a.spec.queue, cluster=a.cluster,
                            nodes=a.node_names,
                            pods=tuple(_stored(p) for p in (
                                a.pods if len(a.pods) == len(a.node_names)
                                else expand_pods(a.spec))))
            for a in victims))
        self.nominations[name] = nom
        res.nominations[name] = nom

    def _hand_over(self, a: Admitted) -> bool:
        """A victim in grace ends while its preemptor still waits for others: its capacity is
        held for the preemptor instead of being freed (True)."""
        by = a.preempted_by
        victims = self.waiting.get(by)
        if (a.grace_until is None or by not in self.nominations or victims is None
                or a.name not in victims or len(victims) == 1):
            return False
        victims.discard(a.name)
        self.held.setdefault(by, []).append(a)
        self.changes += 1
        return True

    def _denominate(self, name: str, res: CycleResult | None) -> None:
        """`name`'s nomination ends (admitted, left, or had its first turn): what is held for
        it is freed, at the end of the cycle when it ends in one (`res`: within a cycle usage
        only grows, which parking relies on)."""
        if self.nominations.pop(name, None) is None:
            return
        held = self.held.pop(name, [])
        if res is None:
            for a in held:
                self._free(a)
            return
        self._freeing.extend(held)
        res.nominations[name] = None

    def _free_deferred(self) -> None:
        """End of cycle: free what was held for preemptors admitted elsewhere in it."""
        for a in self._freeing:
            self._free(a)
        self._freeing.clear()

    def renominate(self, name: str, nom: Nomination) -> None:
        """Restore pending `name`'s nomination from a snapshot (after its admitted and pending
        workloads): its victims still in grace make it wait, the capacity of the ended ones is
        held for it again; with none left in grace it goes first in this cycle."""
        if name not in self.pending:
            return
        self.nominations[name] = nom
        live = self.waiting.get(name, set())
        for v in nom.victims:
            a = self.admitted.get(v.name)
            if a is not None and a.grace_until is not None and a.preempted_by == name:
                live.add(v.name)
            elif v.name in self.unreleased:
                # Ended, but its pods may still run: its nodes are taken (`Snapshot.held`) until
                # the cluster confirms; the preemptor waits for it as for a victim in grace.
                live.add(v.name)
        if not live:
            self.waiting.pop(name, None)
            self._claim(name)
            return
        self.waiting[name] = live
        for v in nom.victims:
            if v.name not in live or v.name in self.unreleased:
                self._hold_ended(name, nom, v, nodes=v.name not in self.unreleased)

    def _hold_ended(self, name: str, nom: Nomination, v: NominatedVictim, *,
                    nodes: bool = True) -> None:
        """Count an ended victim's capacity again, held for `name` (its quota only, when its
        nodes are still taken by its unreleased pods)."""
        leaf = self.tree.index.get(v.queue)
        if leaf is None:
            return  # its queue is gone: nothing to hold
        pods = [as_pod(p) for p in v.pods]
        idx: list[int] = []
        kept = []
        for node, pod in zip(v.nodes if nodes else (), pods, strict=False):
            loc = self.fleet.node_loc.get(node)
            if loc is None or loc[0] != v.cluster or loc[1] != nom.flavor:
                continue  # the node is gone: its quota still counts, the node cannot
            idx.append(loc[2])
            kept.append(pod)
        if idx:
            kept = self.fleet.assign(v.cluster, nom.flavor, idx, kept)
        demand = self._demand(nom.flavor, pods)
        self.tree.add(leaf, demand)
        self.real.add(leaf, demand)
        spec = WorkloadSpec(name=v.name, queue=v.queue, pod_sets=())
        a = Admitted(spec, leaf, nom.flavor, v.cluster, idx, v.nodes, kept, demand, False,
                     nom.at, 0)
        self.held.setdefault(name, []).append(a)
