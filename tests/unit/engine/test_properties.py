"""Invariants I1-I5 of QUOTA-SEMANTICS.md §9 on random trees, fleets and workload streams,
checked after every cycle (hypothesis)."""

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
from scheduling.engine.accounting import EPS

FLAVORS = ("a100-80g", "v100-32g")


@st.composite
def worlds(draw: Any) -> dict[str, Any]:
    """A valid tree (V1-V4), a fleet and a stream of workloads over a few steps."""
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    for t in range(draw(st.integers(1, 3))):
        quota = {}
        child_room: dict[str, tuple[int, int]] = {}
        for f in FLAVORS:
            mn = draw(st.integers(0, 16))
            mx = draw(st.one_of(st.none(), st.integers(mn, 40)))
            lend = draw(st.integers(0, mn))
            quota[(f, "gpu")] = KeyQuota(mn, mx, lend)
            child_room[f] = (mn, mx if mx is not None else 10**6)
        path = f"t{t}"
        queues.append(QueueSpec(path, None, quota))
        n_kids = draw(st.integers(0, 3))
        if not n_kids:
            leaves.append(path)
            continue
        used = dict.fromkeys(FLAVORS, 0)
        for c in range(n_kids):
            kq = {}
            for f in FLAVORS:
                room_min, room_max = child_room[f]
                mn = draw(st.integers(0, max(0, room_min - used[f])))
                used[f] += mn
                mx = draw(st.integers(mn, max(mn, room_max))) if room_max >= mn else mn
                kq[(f, "gpu")] = KeyQuota(mn, min(mx, room_max), mn)  # exclusive 0 (V4)
            queues.append(QueueSpec(f"{path}/c{c}", path, kq))
            leaves.append(f"{path}/c{c}")
    clusters = []
    for ci in range(draw(st.integers(1, 2))):
        nodes = []
        for f in FLAVORS:
            for i in range(draw(st.integers(0, 2))):
                nodes.append(NodeSpec(f"k{ci}-{f}-{i}", f, draw(st.sampled_from([4, 8])), 64,
                                      512, f"r{i % 2}"))
        clusters.append(ClusterSpec(f"k{ci}", tuple(nodes),
                                    health=draw(st.sampled_from([1.0, 1.0, 0.3]))))
    steps = []
    n = 0
    for _ in range(draw(st.integers(2, 8))):
        batch = []
        for _ in range(draw(st.integers(0, 8))):
            n += 1
            flavors = tuple(draw(st.permutations(FLAVORS))[:draw(st.integers(1, 2))])
            prio, can = draw(st.sampled_from([(100, False), (1000, False), (10000, True)]))
            batch.append(WorkloadSpec(
                f"w{n}", draw(st.sampled_from(leaves)),
                (PodSetSpec(draw(st.integers(1, 3)), flavors, draw(st.sampled_from([1, 2, 4, 8])),
                            4, 16),),
                submitted_at=float(len(steps)), priority=prio, can_preempt=can,
                preemptible=draw(st.sampled_from([True, True, False])),
                termination_grace_s=draw(st.sampled_from([0, 1])),
                topology_same=draw(st.sampled_from(["", "", "rack"]))))
        finish = draw(st.lists(st.integers(0, 100), max_size=3))
        steps.append((batch, finish))
    return {"queues": queues, "clusters": clusters, "steps": steps}


def _replay(world: dict[str, Any], check: bool) -> list[Any]:
    eng = Engine(queues=world["queues"], clusters=world["clusters"],
                 flavors=(FlavorSpec("a100-80g", 80), FlavorSpec("v100-32g", 32)),
                 settings=Settings(reclaim_cooldown_s=2, starvation_s=3))
    log: list[Any] = []
    reasons: dict[str, str] = {}
    for step, (batch, finish) in enumerate(world["steps"]):
        now = float(step)
        for a in list(eng.admitted.values()):
            if a.grace_until is not None and a.grace_until <= now:
                eng.end(a.name, now)
                eng.submit(a.spec)
        names = sorted(eng.admitted)
        for i in finish:
            if names and eng.admitted.get(names[i % len(names)]) is not None:
                if eng.admitted[names[i % len(names)]].grace_until is None:
                    eng.end(names[i % len(names)], now)
        for w in batch:
            if not eng.check(w):
                eng.submit(w)
        res = eng.cycle(now)
        for a in res.admitted:
            eng.mark_running(a.workload)
        for name, r in res.reasons.items():
            reasons[name] = str(r.code)
        log.append((sorted((a.workload, a.cluster, a.nodes, a.borrowed) for a in res.admitted),
                    sorted((p.workload, p.by, str(p.kind)) for p in res.preempted),
                    sorted((k, str(v.code)) for k, v in res.reasons.items())))
        if check:
            _invariants(eng, res, reasons)
    return log


def _invariants(eng: Engine, res: Any, reasons: dict[str, str]) -> None:
    tree = eng.tree
    # I1: usage within max at every queue; the fleet within capacity; no node over-committed.
    for qi in range(1, len(tree.paths)):
        for k in range(len(tree.keys)):
            assert tree.u[qi][k] <= tree.mx[qi][k] + EPS, (tree.paths[qi], tree.keys[k])
    for c in eng.fleet.clusters:
        for pool in c.pools.values():
            assert all(g >= 0 for g in pool.fg)
            assert all(x >= -EPS for x in pool.fc) and all(x >= -EPS for x in pool.fm)
    # I3: non-preemptible usage of every subtree stays within its min.
    np_use: dict[tuple[int, int], float] = {}
    for a in eng.admitted.values():
        if not a.spec.preemptible:
            for node in tree.chain[a.leaf]:
                for k, amount in a.demand:
                    np_use[(node, k)] = np_use.get((node, k), 0.0) + amount
    for (node, k), used in np_use.items():
        assert used <= tree.mn[node][k] + EPS, (tree.paths[node], used, tree.mn[node][k])
    # I5: every admitted workload has one node per pod, all in its cluster, of its flavor.
    for a in res.admitted:
        assert len(a.nodes) == eng.admitted[a.workload].spec.pod_count
        for node in a.nodes:
            cname, flavor, _ = eng.fleet.node_loc[node]
            assert cname == a.cluster and flavor == a.flavor
    # I2: pending within-guarantee work below min is admitted, waits for victims, or has a
    # reason naming why.
    for name, p in eng.pending.items():
        if p.not_before is not None or not p.flavors:
            continue
        d = p.demand[p.flavors[0]]
        if d and tree.within_guarantee(p.leaf, d) and any(
                tree.u[p.leaf][k] < tree.mn[p.leaf][k] - EPS for k, _ in d):
            assert name in eng.waiting or name in reasons, name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_invariants_hold_after_every_cycle(world: dict[str, Any]) -> None:
    _replay(world, check=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_same_inputs_same_decisions(world: dict[str, Any]) -> None:
    # I4: determinism.
    assert _replay(world, check=False) == _replay(world, check=False)
