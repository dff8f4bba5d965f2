"""A small organisation for the scheduling tests: a tree, two teams, two simulated clusters.

    rd (a100-80g/gpu min 16, max 32, lendable 16)
      vision (min 8, max 24)    team vision: alice (researcher), bob (lead)
      nlp    (min 8, max 24)    team nlp: carol
    clusters bj (4 nodes x 8 A100) and sh (4 nodes x 8 A100), simulated (by default).

`request` is a submission body for it; `submit` and `running_workload` put work on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from quotas.models import Flavor, Queue, QuotaEntry, Team, TeamMembership, TeamRole
from scheduling.backends import clear_backend_cache
from scheduling.fleet import dispatch
from scheduling.models import Cluster, Node, PriorityClass, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.factories import AdminFactory, UserFactory

S = WorkloadState

DEFAULT_CLASSES = [("inference-high", 10000, True), ("training", 1000, False),
                   ("batch-low", 100, False)]


@dataclass
class World:
    alice: Any
    bob: Any
    carol: Any
    admin: Any
    vision: Queue
    nlp: Queue
    bj: Cluster
    sh: Cluster


def make_world(*, speedup: float = 1.0, nodes_per_cluster: int = 4,
               cluster_names: tuple[str, ...] = ("bj", "sh"),
               connection: dict[str, Any] | None = None) -> World:
    """Create the organisation above and return its handles."""
    # Transactional tests elsewhere flush the rows the data migration seeded.
    for name, value, can_preempt in DEFAULT_CLASSES:
        PriorityClass.objects.get_or_create(name=name, defaults={
            "value": value, "can_preempt": can_preempt})
    a100 = Flavor.objects.create(name="a100-80g", gpu_memory_gib=80,
                                 node_selector={"allot.io/flavor": "a100-80g"})
    rd = Queue.objects.create(name="rd")
    vision = Queue.objects.create(name="vision", parent=rd, namespace="rd-vision")
    nlp = Queue.objects.create(name="nlp", parent=rd, namespace="rd-nlp")
    QuotaEntry.objects.create(queue=rd, flavor=a100, resource="gpu", min=Decimal(16),
                              max=Decimal(32))
    for q in (vision, nlp):
        QuotaEntry.objects.create(queue=q, flavor=a100, resource="gpu", min=Decimal(8),
                                  max=Decimal(24))
    alice, bob, carol = (UserFactory(username=n) for n in ("alice", "bob", "carol"))
    admin = AdminFactory(username="root")
    t_vision = Team.objects.create(name="vision")
    t_vision.queues.add(vision)
    t_nlp = Team.objects.create(name="nlp")
    t_nlp.queues.add(nlp)
    TeamMembership.objects.create(team=t_vision, user=alice, role=TeamRole.RESEARCHER)
    TeamMembership.objects.create(team=t_vision, user=bob, role=TeamRole.LEAD)
    TeamMembership.objects.create(team=t_nlp, user=carol, role=TeamRole.RESEARCHER)
    clusters = []
    for name in cluster_names:
        c = Cluster.objects.create(name=name, region="cn", backend="simulated",
                                   connection={"speedup": speedup, **(connection or {})})
        for i in range(nodes_per_cluster):
            Node.objects.create(cluster=c, name=f"{name}-a100-{i}", flavor=a100, gpus=8,
                                cpu=Decimal(96), memory_gib=Decimal(1024), rack="r1")
        clusters.append(c)
    return World(alice=alice, bob=bob, carol=carol, admin=admin, vision=vision, nlp=nlp,
                 bj=clusters[0], sh=clusters[1] if len(clusters) > 1 else clusters[0])


@contextmanager
def world_on_kube(kube: Any, *, nodes_per_cluster: int = 2, **connection: Any
                  ) -> Iterator[World]:
    """The organisation with one cluster, bj, on the Kubernetes API double `kube` (its nodes
    added there as A100 nodes); `connection`: more of bj's connection settings."""
    world = make_world(nodes_per_cluster=nodes_per_cluster, cluster_names=("bj",))
    world.bj.backend = "kubernetes"
    world.bj.connection = {**kube.connection, "timeout_s": 2, **connection}
    world.bj.save(update_fields=["backend", "connection"])
    for node in world.bj.nodes.all():
        kube.state.add_node(node.name, labels={"allot.io/flavor": "a100-80g"}, gpus=8,
                            cpu="96", memory="1024Gi")
    clear_backend_cache()
    try:
        yield world
    finally:
        clear_backend_cache()


def request(name: str, *, queue: str = "rd/vision", gpus: int = 8, count: int = 1,
            **extra: Any) -> dict[str, Any]:
    """A submission body (API.md shape)."""
    body: dict[str, Any] = {
        "name": name, "queue": queue, "priority_class": "training", "preemptible": True,
        "checkpoint": True, "image": "registry.local/train:1.4",
        "command": ["python", "train.py"], "duration_hint_s": 3600,
        "pods": [{"count": count, "flavors": ["a100-80g"], "gpus": gpus, "cpu": 8,
                  "memory_gib": 64}],
    }
    body.update(extra)
    return body


def submit(world, name, *, user=None, queue="rd/vision", **kw):
    return workload_submit(user=user or world.alice, data=request(name, queue=queue, **kw))


def running_workload(world, name, duration_s):
    w = workload_submit(user=world.alice, data=request(name, duration_hint_s=duration_s))
    adm = cycle_run(wait=True)
    assert w.pk in adm.admitted
    cluster_id = w.admissions.get().cluster_id
    w.refresh_from_db()
    if w.state == S.RESERVED:  # dispatched after commit (not inside the cycle)
        assert dispatch.cluster_dispatch(cluster_id=cluster_id).started == [w.pk]
    else:  # the simulated cluster started it inside the cycle (the default)
        assert w.state == S.RUNNING
    return w, cluster_id
