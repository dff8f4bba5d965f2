"""The submission-time request check: would this request fit the quota tree and the fleet at
all, were the fleet empty? Impossible requests are rejected at submission with the engine's
own reasons.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db import connection

from core import changes
from core.quantity import amounts, equivalents
from quotas.models import Flavor
from scheduling import engine
from scheduling.engine.engine import Engine as EngineCore
from scheduling.models import (
    Cluster,
    Node,
    PodSet,
    Workload,
)
from scheduling.workers.snapshot import _f, engine_settings


class RequestChecker:
    """The engine's impossibility check for new requests (QUOTA-SEMANTICS.md §4.7).

    The tree and the fleet are read once per checker (a submission batch) and kept, so a stream
    of submissions does not rebuild them each time; any change to those tables shows at once.
    On PostgreSQL they are kept per thread until the change log says a `config` table changed
    (`core.changes`); elsewhere per process for a few seconds, keyed by a one-query
    stamp of the tables they come from.
    """

    _cache: tuple[Any, float, Any] | None = None
    TTL_S = 30.0

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._engine: Any = None

    @staticmethod
    def _stamp() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT COUNT(*) FROM quotas_quotaentry),"
                " (SELECT COALESCE(SUM(min), 0) + COALESCE(SUM(max), 0)"
                "  + COALESCE(SUM(lendable), 0) FROM quotas_quotaentry),"
                " (SELECT MAX(updated_at) FROM quotas_queue),"
                " (SELECT COUNT(*) FROM quotas_queue),"
                " (SELECT COUNT(*) FROM scheduling_node),"
                " (SELECT COALESCE(SUM(gpus), 0) + COALESCE(SUM(cpu), 0)"
                "  + COALESCE(SUM(memory_gib), 0) FROM scheduling_node),"
                " (SELECT COUNT(*) FROM scheduling_cluster WHERE enabled),"
                " (SELECT COUNT(*) FROM quotas_flavor),"
                " (SELECT COALESCE(SUM(gpu_memory_gib), 0) FROM quotas_flavor)")
            return cursor.fetchone()

    def _build(self) -> Any:
        snapshot, _ = _static_snapshot(self.now)
        return EngineCore(queues=snapshot.queues, clusters=snapshot.clusters,
                          flavors=snapshot.flavors, settings=snapshot.settings)

    def engine(self) -> Any:
        if self._engine is None:
            # PostgreSQL: cached per thread until a `config` table changes (the change log;
            # inside a submission, the view it already checked: no query at all).
            view = changes.validate()
            if view is not None:
                self._engine = view.derive("request checker", frozenset({"config"}),
                                           self._build)
                return self._engine
            stamp = self._stamp()
            cached = RequestChecker._cache
            if cached is not None and cached[0] == stamp and time.monotonic() < cached[1]:
                self._engine = cached[2]
            else:
                self._engine = self._build()
                RequestChecker._cache = (stamp, time.monotonic() + self.TTL_S, self._engine)
        return self._engine

    def check(self, workload: Workload, pod_sets: list[PodSet]) -> list[tuple[str, str]]:
        """Reasons the request can never fit (empty if it may wait)."""
        pc = workload.priority_class
        spec = engine.WorkloadSpec(
            name=str(workload.pk or workload.name), queue=workload.queue.path,
            display_name=workload.name,
            pod_sets=tuple(
                engine.PodSetSpec(count=p.count, flavors=tuple(p.flavors), gpus=_f(p.gpus),
                                  cpu=_f(p.cpu), memory_gib=_f(p.memory_gib),
                                  gpu_memory_gib=p.gpu_memory_gib,
                                  resources=engine.resources_of(amounts(p.resources)))
                for p in pod_sets),
            submitted_at=self.now.timestamp(), priority=pc.value, priority_class=pc.name,
            can_preempt=pc.can_preempt, preemptible=workload.preemptible,
            checkpoint=workload.checkpoint,
            termination_grace_s=float(workload.termination_grace_s),
            strategy=workload.strategy, dataset=workload.dataset,
            topology_same=str((workload.topology or {}).get("same", "")),
        )
        return [(str(r.code), r.message) for r in self.engine().check(spec)]


def request_check(workload: Workload, pod_sets: list[PodSet], *, now: datetime
                  ) -> list[tuple[str, str]]:
    """Reasons a new request can never fit (empty if it may); run at submission."""
    return RequestChecker(now).check(workload, pod_sets)


def _static_snapshot(now: datetime) -> tuple[engine.Snapshot, None]:
    """The tree and fleet only (no workloads): what `check_request` needs."""
    from quotas.selectors import tree_specs
    from quotas.tree_rules import validate_tree

    specs = tree_specs()
    report = validate_tree(specs.values())
    queues = tuple(
        engine.QueueSpec(path=path, parent=spec.parent, quota={
            key: engine.KeyQuota(min=float(res.min),
                                 max=None if res.max is None else float(res.max),
                                 lendable=float(res.lendable))
            for key, res in report.resolved.get(path, {}).items()})
        for path, spec in specs.items()
    )
    by_cluster: dict[int, list[engine.NodeSpec]] = defaultdict(list)
    for n in Node.objects.select_related("flavor").order_by("cluster_id", "name"):
        by_cluster[n.cluster_id].append(engine.NodeSpec(
            name=n.name, flavor=n.flavor.name, gpus=n.gpus, cpu=_f(n.cpu),
            memory_gib=_f(n.memory_gib), rack=n.rack, ready=True,
            resources=engine.resources_of(amounts(n.resources))))
    # Impossible means impossible on the whole fleet at full health: a node or a cluster that
    # is down now may come back, so health and readiness do not reject anything here.
    clusters = tuple(
        engine.ClusterSpec(name=c.name, nodes=tuple(by_cluster.get(c.pk, ())),
                           region=c.region, health=1.0, price=float(c.price),
                           datasets=frozenset(c.datasets or ()))
        for c in Cluster.objects.filter(enabled=True).order_by("name"))
    return engine.Snapshot(
        now=now.timestamp(), queues=queues, clusters=clusters,
        flavors=tuple(engine.FlavorSpec(name=f.name, gpu_memory_gib=f.gpu_memory_gib,
                                        gpu_equivalents=equivalents(f.gpu_equivalents))
                      for f in Flavor.objects.all()),
        settings=engine_settings()), None
