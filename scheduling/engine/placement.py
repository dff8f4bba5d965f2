"""Cluster-level placement (QUOTA-SEMANTICS.md §7): the fleet, cluster health and score.

A gang gets every pod in one cluster (`Pool` places it on that cluster's nodes).

Choices where the semantics page is silent:
- Cluster utilisation (the packing term) is over the cluster's GPUs, or its CPUs when it has
  no GPUs; the cost term divides the price by the highest price among the candidates.
- Clusters tie on score by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduling.engine.accounting import fmt
from scheduling.engine.fragmentation import Mix
from scheduling.engine.pool import Pod, Pool, ext_of, whole_gpus
from scheduling.engine.types import ClusterSpec, Reason, ReasonCode


@dataclass
class ClusterState:
    """A cluster's live state: health, price, datasets and its pools per flavor."""

    name: str
    region: str
    health: float
    price: float
    datasets: frozenset[str]
    pools: dict[str, Pool]
    gpu_total: float = 0.0
    gpu_used: float = 0.0
    cpu_total: float = 0.0
    cpu_used: float = 0.0

    def recount(self) -> None:
        self.gpu_total = self.cpu_total = 0.0
        for pool in self.pools.values():
            g, c, _ = pool.totals()
            self.gpu_total += g
            self.cpu_total += c

    def utilisation(self, extra_gpus: float, extra_cpu: float) -> float:
        if self.gpu_total > 0:
            return min(1.0, (self.gpu_used + extra_gpus) / self.gpu_total)
        if self.cpu_total > 0:
            return min(1.0, (self.cpu_used + extra_cpu) / self.cpu_total)
        return 1.0


class Fleet:
    """All clusters, their pools, and the node lookup by name."""

    def __init__(self, clusters: Sequence[ClusterSpec], min_health: float,
                 reserve_cpu_per_gpu: float,
                 card_mem: dict[str, float | None] | None = None) -> None:
        self.min_health = min_health
        # The recent mix of requests per flavor (what fragmentation-aware placement reads).
        self.mixes: dict[str, Mix] = {}
        self.reserve = reserve_cpu_per_gpu
        self.clusters: list[ClusterState] = []
        self.by_name: dict[str, ClusterState] = {}
        self.node_loc: dict[str, tuple[str, str, int]] = {}
        self.flavor_clusters: dict[str, list[ClusterState]] = {}
        # The extended resources some node of a flavor advertises (ready or not).
        self.flavor_resources: dict[str, set[str]] = {}
        for spec in sorted(clusters, key=lambda c: c.name):
            pools: dict[str, Pool] = {}
            for node in spec.nodes:
                pool = pools.get(node.flavor)
                if pool is None:
                    mix = self.mixes.setdefault(node.flavor, Mix())
                    pool = pools[node.flavor] = Pool(spec.name, node.flavor,
                                                     (card_mem or {}).get(node.flavor), mix)
                self.node_loc[node.name] = (spec.name, node.flavor, len(pool.names))
                pool.add_node(node.name, int(node.gpus), float(node.cpu),
                              float(node.memory_gib), node.rack, node.ready, node.resources)
                if node.resources:
                    self.flavor_resources.setdefault(node.flavor, set()).update(
                        res for res, _ in node.resources)
            for pool in pools.values():
                pool.build_index()
            state = ClusterState(spec.name, spec.region, float(spec.health), float(spec.price),
                                 frozenset(spec.datasets), pools)
            state.recount()
            self.clusters.append(state)
            self.by_name[spec.name] = state
            for flavor in pools:
                self.flavor_clusters.setdefault(flavor, []).append(state)

    def healthy(self, cluster: ClusterState) -> bool:
        return cluster.health > self.min_health

    def capacity(self, used_on_unhealthy: dict[tuple[str, str], float]) -> dict[tuple[str, str],
                                                                                float]:
        """Per key: healthy clusters' ready nodes plus what is used on unhealthy ones."""
        cap: dict[tuple[str, str], float] = dict(used_on_unhealthy)
        for cluster in self.clusters:
            if not self.healthy(cluster):
                continue
            for flavor, pool in cluster.pools.items():
                g, c, m = pool.totals()
                for res, v in (("gpu", g), ("cpu", c), ("memory", m),
                               *pool.ext_totals().items()):
                    cap[(flavor, res)] = cap.get((flavor, res), 0.0) + v
        return cap

    def assign(self, cluster: str, flavor: str, nodes: Sequence[int],
               pods: Sequence[Pod]) -> list[Pod]:
        """Take the pods' resources on their nodes; returns the pods with their cards."""
        state = self.by_name[cluster]
        pool = state.pools[flavor]
        out = []
        for i, pod in zip(nodes, pods, strict=True):
            out.append(pool.take(i, pod))
            state.gpu_used += pod[0]
            state.cpu_used += pod[1]
        return out

    def unassign(self, cluster: str, flavor: str, nodes: Sequence[int],
                 pods: Sequence[Pod]) -> None:
        state = self.by_name[cluster]
        pool = state.pools[flavor]
        for i, pod in zip(nodes, pods, strict=True):
            pool.give(i, pod)
            state.gpu_used -= pod[0]
            state.cpu_used -= pod[1]

    def _candidates(self, flavor: str,
                    allowed: frozenset[str] | None) -> list[ClusterState] | Reason:
        holders = self.flavor_clusters.get(flavor, [])
        ready = [c for c in holders if any(c.pools[flavor].ready)]
        if not ready:
            return Reason(ReasonCode.FLAVOR_UNAVAILABLE,
                          f"flavor {flavor}: no cluster has ready {flavor} nodes")
        allowed_c = [c for c in ready if allowed is None or c.name in allowed]
        if not allowed_c:
            names = ", ".join(sorted(allowed or ()))
            return Reason(ReasonCode.POLICY_DENIED,
                          f"flavor {flavor}: allowed clusters [{names}] hold no ready "
                          f"{flavor} nodes")
        healthy = [c for c in allowed_c if self.healthy(c)]
        if not healthy:
            detail = ", ".join(f"{c.name} {fmt(c.health)}" for c in allowed_c)
            return Reason(ReasonCode.CLUSTER_UNHEALTHY,
                          f"flavor {flavor}: every cluster is at or below health "
                          f"{fmt(self.min_health)} ({detail})")
        return healthy

    def flavor_problem(self, flavor: str, allowed: frozenset[str] | None) -> Reason | None:
        """FLAVOR_UNAVAILABLE, POLICY_DENIED or CLUSTER_UNHEALTHY when no cluster qualifies."""
        min_health = self.min_health
        for c in self.flavor_clusters.get(flavor, ()):
            # (The common answer, without building the candidate lists.)
            if ((allowed is None or c.name in allowed) and c.health > min_health
                    and True in c.pools[flavor].ready):
                return None
        found = self._candidates(flavor, allowed)
        return found if isinstance(found, Reason) else None

    def can_place(self, flavor: str, pods: Sequence[Pod], *, spread: bool, same_rack: bool,
                  allowed: frozenset[str] | None, dataset: str,
                  weights: tuple[float, float, float, float]) -> bool:
        """Whether `try_place` (commit=False) would place the pods, without its reason text.
        With one cluster able to hold them it is tried directly (the score only orders
        several)."""
        dg = 0
        max_pod = 0
        for pod in pods:
            if pod[0] >= 1:
                dg += int(pod[0])
                if pod[0] > max_pod:
                    max_pod = int(pod[0])
        able: list[ClusterState] = []
        for c in self.flavor_clusters.get(flavor, ()):
            if (allowed is not None and c.name not in allowed) or not self.healthy(c):
                continue
            pool = c.pools[flavor]
            if (dg and pool.free < dg) or (max_pod and pool.largest_free() < max_pod):
                continue
            able.append(c)
        if not able:
            return False
        if len(able) > 1:
            return not isinstance(self.try_place(
                flavor, pods, spread=spread, same_rack=same_rack, allowed=allowed,
                dataset=dataset, weights=weights, commit=False), Reason)
        pool = able[0].pools[flavor]
        racks: list[str | None] = list(pool.racks(spread)) if same_rack else [None]
        for rack in racks:
            got = pool.place(pods, spread, self.reserve, rack)
            if got is not None:
                pool.undo(got)
                return True
        return False

    def try_place(
        self, flavor: str, pods: Sequence[Pod], *, spread: bool, same_rack: bool,
        allowed: frozenset[str] | None, dataset: str, weights: tuple[float, float, float, float],
        commit: bool, brief: bool = False,
    ) -> tuple[str, list[int]] | Reason:
        """Choose a cluster by score and nodes in it; take them when `commit`.

        Returns (cluster name, node indices per pod) or the reason nothing fits (`brief`: its
        code only, with an empty message). The pods with their cards are the pool's `placed`.
        """
        found = self._candidates(flavor, allowed)
        if isinstance(found, Reason):
            return found
        healthy = found
        dg = sum(p[0] for p in pods)
        dc = sum(p[1] for p in pods)
        whole = whole_gpus(pods)
        scored = self._by_score(flavor, healthy, dg, whole, dc, spread, dataset, weights)
        topology_only = False
        max_pod = max((int(p[0]) for p in pods), default=0)
        for _, _, c in scored:
            pool = c.pools[flavor]
            if max_pod and pool.largest_free() < max_pod:
                continue
            if same_rack:
                got = None
                for rack in pool.racks(spread):
                    got = pool.place(pods, spread, self.reserve, rack)
                    if got is not None:
                        break
                if got is None and not topology_only:
                    free = pool.place(pods, spread, self.reserve, None)
                    if free is not None:
                        topology_only = True
                        pool.undo(free)
            else:
                got = pool.place(pods, spread, self.reserve, None)
            if got is None:
                continue
            if commit:
                c.gpu_used += dg
                c.cpu_used += dc
            else:
                pool.undo(got)
            return c.name, got
        return self._no_room(flavor, pods, healthy, dg, max_pod, topology_only, brief)

    @staticmethod
    def _by_score(flavor: str, healthy: list[ClusterState], dg: float, whole: int, dc: float,
                  spread: bool,
                  dataset: str, weights: tuple[float, float, float, float]
                  ) -> list[tuple[float, str, ClusterState]]:
        """The healthy clusters with enough free GPUs on the flavor, best score first (ties by
        name): packing (or spreading), dataset affinity, health, price."""
        w_fit, w_aff, w_health, w_cost = weights
        top_price = max(c.price for c in healthy) or 1.0
        scored = []
        for c in healthy:
            pool = c.pools[flavor]
            if whole and pool.free_gpus() < whole:
                continue
            util = c.utilisation(dg, dc)
            packing = 1.0 - util if spread else util
            cached = 1.0 if dataset and dataset in c.datasets else 0.0
            score = (w_fit * packing + w_aff * cached + w_health * c.health
                     - w_cost * (c.price / top_price))
            scored.append((-score, c.name, c))
        scored.sort(key=lambda t: (t[0], t[1]))
        return scored

    @staticmethod
    def _no_room(flavor: str, pods: Sequence[Pod], healthy: list[ClusterState], dg: float,
                 max_pod: int, topology_only: bool, brief: bool) -> Reason:
        """Why no healthy cluster places the pods (`brief`: the code only)."""
        if brief:
            return Reason(ReasonCode.TOPOLOGY_UNSATISFIABLE if topology_only
                          else ReasonCode.NO_CAPACITY, "")
        n = len(pods)
        frac = max((p[0] for p in pods if 0 < p[0] < 1), default=0.0)
        shape = (f"{n} pod{'s' if n != 1 else ''} of {fmt(max_pod or frac)} GPU"
                 if max_pod or frac else f"{n} pods")
        if topology_only:
            return Reason(ReasonCode.TOPOLOGY_UNSATISFIABLE,
                          f"flavor {flavor}: {shape} fit in a cluster but not within one rack")
        best = max(healthy, key=lambda c: (c.pools[flavor].free_gpus(), c.name))
        bp = best.pools[flavor]
        held = sum(c.pools[flavor].held for c in healthy)
        if frac and not max_pod:
            top = max(((s[0], s[1]) for c in healthy
                       for i, shared in enumerate(c.pools[flavor].shared)
                       if c.pools[flavor].ready[i] for s in shared.values()), default=None)
            card = (f"; no fully free card, the most free shared card has {fmt(top[0] / 1000)} "
                    f"GPU and {fmt(top[1])} GiB free" if top and not bp.free_gpus() else "")
            return Reason(ReasonCode.NO_CAPACITY, (
                f"flavor {flavor}: no healthy cluster can place {shape} ({fmt(dg)} GPUs) on "
                f"one card with the memory it asks{card}"))
        # Extended resources the pods ask: the most of each free on one ready node, and what
        # ended workloads still hold of it.
        asked: dict[str, float] = {}
        for p in pods:
            for r, a in ext_of(p):
                asked[r] = max(asked.get(r, 0.0), a)
        ext = "".join(
            f"; {r}: {fmt(a)} per pod, at most {fmt(most)} free on a node"
            for r, a in sorted(asked.items())
            for most in [max((max(0.0, free[i]) for c in healthy
                              for free in [c.pools[flavor].ext.get(r)] if free is not None
                              for i in range(len(free)) if c.pools[flavor].ready[i]),
                             default=0.0)])
        held_parts = [f"{fmt(held)} GPUs"] if held else []
        held_parts += [f"{fmt(v)} {r}" for r in sorted(asked)
                       for v in [sum(c.pools[flavor].held_ext.get(r, 0.0) for c in healthy)]
                       if v]
        return Reason(ReasonCode.NO_CAPACITY, (
            f"flavor {flavor}: no healthy cluster can place {shape} ({fmt(dg)} GPUs); most free: "
            f"{best.name} {bp.free_gpus()} GPUs, largest node {bp.largest_free()} free" + ext
            + (f"; {', '.join(held_parts)} still held by ended workloads until their clusters "
               "confirm the delete" if held_parts else "")))
