"""Groups and parking are an optimisation only: an engine that groups identical pending
workloads and parks failed groups decides exactly what an engine that evaluates every pending
workload on its own in every cycle decides (hypothesis, random trees, fleets and streams with
many identical workloads)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import (
    ClusterSpec,
    Engine,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    Settings,
    WorkloadSpec,
)

FLAVORS = ("a100-80g", "v100-32g")


@st.composite
def streams(draw: Any) -> dict[str, Any]:
    """A flat or two-level tree, a small fleet, and a stream drawn from a few shapes (so many
    pending workloads are identical and share a group)."""
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    for t in range(draw(st.integers(1, 3))):
        quota = {}
        for f in FLAVORS:
            mn = draw(st.integers(0, 12))
            quota[(f, "gpu")] = KeyQuota(mn, draw(st.sampled_from([mn, mn + 8, 40])), mn)
        path = f"t{t}"
        queues.append(QueueSpec(path, None, quota))
        if draw(st.booleans()):
            leaves.append(path)
            continue
        for c in range(2):
            kq = {(f, "gpu"): KeyQuota(quota[(f, "gpu")].min // 2, quota[(f, "gpu")].max,
                                       quota[(f, "gpu")].min // 2) for f in FLAVORS}
            queues.append(QueueSpec(f"{path}/c{c}", path, kq))
            leaves.append(f"{path}/c{c}")
    nodes = []
    for f in FLAVORS:
        for i in range(draw(st.integers(1, 3))):
            nodes.append(NodeSpec(f"k-{f}-{i}", f, draw(st.sampled_from([4, 8])), 64, 512,
                                  f"r{i % 2}"))
    shapes = []
    for _ in range(draw(st.integers(1, 4))):
        flavors = tuple(draw(st.permutations(FLAVORS))[:draw(st.integers(1, 2))])
        prio, can = draw(st.sampled_from([(100, False), (1000, False), (10000, True)]))
        shapes.append((draw(st.sampled_from(leaves)),
                       PodSetSpec(draw(st.integers(1, 2)), flavors,
                                  draw(st.sampled_from([1, 2, 4, 8])), 4, 16),
                       prio, can, draw(st.sampled_from([True, True, False])),
                       draw(st.sampled_from(["", "", "rack"]))))
    steps = []
    n = 0
    for step in range(draw(st.integers(3, 10))):
        batch = []
        for _ in range(draw(st.integers(0, 6))):
            n += 1
            leaf, ps, prio, can, preemptible, topo = draw(st.sampled_from(shapes))
            batch.append(WorkloadSpec(f"w{n}", leaf, (ps,), submitted_at=float(step),
                                      priority=prio, can_preempt=can, preemptible=preemptible,
                                      termination_grace_s=draw(st.sampled_from([0, 1])),
                                      topology_same=topo))
        steps.append((batch, draw(st.lists(st.integers(0, 100), max_size=3))))
    return {"queues": queues, "clusters": [ClusterSpec("k", tuple(nodes))], "steps": steps}


def _decisions(world: dict[str, Any], parking: bool) -> list[Any]:
    eng = Engine(queues=world["queues"], clusters=world["clusters"],
                 flavors=(FlavorSpec("a100-80g", 80), FlavorSpec("v100-32g", 32)),
                 settings=Settings(reclaim_cooldown_s=2, starvation_s=3), parking=parking)
    log: list[Any] = []
    # Two quiet steps after the stream: starvation and cooldowns run out with no new events.
    steps = [*world["steps"], ([], []), ([], [])]
    for step, (batch, finish) in enumerate(steps):
        now = float(step)
        for a in sorted(eng.admitted.values(), key=lambda a: a.name):
            if a.grace_until is not None and a.grace_until <= now:
                eng.end(a.name, now)
                eng.submit(a.spec)
        names = sorted(eng.admitted)
        for i in finish:
            name = names[i % len(names)] if names else ""
            a = eng.admitted.get(name)
            if a is not None and a.grace_until is None:
                eng.end(name, now)
        for w in batch:
            if not eng.check(w):
                eng.submit(w)
        res = eng.cycle(now)
        for a in res.admitted:
            eng.mark_running(a.workload)
        log.append((step,
                    [(a.workload, a.cluster, a.flavor, a.nodes, a.borrowed) for a in res.admitted],
                    sorted((p.workload, p.by, str(p.kind)) for p in res.preempted)))
    return log


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_parking_decides_like_a_full_evaluation(world: dict[str, Any]) -> None:
    assert _decisions(world, parking=True) == _decisions(world, parking=False)
