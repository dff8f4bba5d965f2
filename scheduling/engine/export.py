"""An engine's state written back as a `Snapshot`: the inverse of `Engine.from_snapshot`.

What the workers keep between cycles is the database, from which they build a snapshot for
every cycle; the scenario runner keeps one engine alive. `snapshot_of` lets the runner replay
as the workers do (`scheduling.replay.runner`, `rebuild`): an engine rebuilt from the snapshot
of another must decide what the other decides, so whatever a cycle needs from earlier cycles
has to be in the snapshot (a preemptor's nomination is).
"""

from __future__ import annotations

from dataclasses import replace

from scheduling.engine.engine import Engine
from scheduling.engine.pool import cards_of
from scheduling.engine.types import (
    AdmittedWorkload,
    ClusterSpec,
    RepaymentRecord,
    Snapshot,
)


def snapshot_of(eng: Engine, now: float) -> Snapshot:
    """The snapshot from which `Engine.from_snapshot` rebuilds `eng` between two cycles:
    its tree, its fleet as it is now (health, ready nodes), pending and admitted workloads,
    cooldowns, repayment history, victims in grace and nominations."""
    queues, clusters, flavors = eng.specs
    paths = eng.tree.paths
    pending = tuple(
        p.spec if p.spec.not_before == p.not_before else replace(p.spec, not_before=p.not_before)
        for p in eng.pending.values())
    admitted = tuple(
        AdmittedWorkload(workload=a.spec, cluster=a.cluster, flavor=a.flavor,
                         nodes=a.node_names, borrowed=a.borrowed, admitted_at=a.admitted_at,
                         running=a.running, admission_seq=a.seq, grace_until=a.grace_until,
                         preempted_by=a.preempted_by, cards=cards_of(a.pods)
                         if len(a.pods) == len(a.node_names) else ())
        for a in eng.admitted.values())
    repayment = tuple(
        RepaymentRecord(queue=paths[leaf], ended_at=at, forced=forced)
        for leaf, hist in eng.repay.items() for at, forced in hist)
    return Snapshot(
        now=now, queues=queues, clusters=tuple(_cluster_now(eng, c) for c in clusters),
        flavors=flavors, pending=pending, admitted=admitted, settings=eng.settings,
        disruption_budgets=tuple(eng.budgets), repayment=repayment,
        cooldowns={paths[q]: until for q, until in eng.cooldown.items()},
        waiting={name: tuple(sorted(victims)) for name, victims in eng.waiting.items()},
        nominations=dict(eng.nominations))


def _cluster_now(eng: Engine, spec: ClusterSpec) -> ClusterSpec:
    """A cluster as given, with its health and its nodes' readiness as they are now."""
    state = eng.fleet.by_name[spec.name]
    nodes = []
    for node in spec.nodes:
        _, flavor, i = eng.fleet.node_loc[node.name]
        ready = state.pools[flavor].ready[i]
        nodes.append(node if node.ready == ready else replace(node, ready=ready))
    return replace(spec, health=state.health, nodes=tuple(nodes))
