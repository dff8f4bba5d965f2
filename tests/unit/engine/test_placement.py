"""Placement (§7): GPU memory, node fit, racks, CPU reserve, cluster score, health."""

from __future__ import annotations

from scheduling.engine import ReasonCode

from .builders import A100, cluster, engine, q, run, wl

RC = ReasonCode


def test_binpack_and_spread_nodes() -> None:
    eng = engine([q("a", 0, 64)], [cluster(nodes=3)])
    run(eng, 0, wl("w1", "a", 4))
    res = run(eng, 1, wl("w2", "a", 2, t=1))
    assert res.admitted[0].nodes == ("c-a100-80g-0",)  # binpack: most allocated node
    eng2 = engine([q("a", 0, 64, strategy="spread")], [cluster(nodes=3)])
    run(eng2, 0, wl("w1", "a", 4))
    res = run(eng2, 1, wl("w2", "a", 2, t=1))
    assert res.admitted[0].nodes == ("c-a100-80g-1",)  # spread: least allocated, lowest index


def test_cluster_score_binpack_spread_price_affinity() -> None:
    clusters = [cluster("aa", nodes=2), cluster("bb", nodes=2)]
    eng = engine([q("a", 0, 64)], clusters)
    run(eng, 0, wl("w1", "a", 8))
    assert run(eng, 1, wl("w2", "a", 4, t=1)).admitted[0].cluster == "aa"  # fills aa first
    eng = engine([q("a", 0, 64)], clusters)
    run(eng, 0, wl("w1", "a", 8))
    res = run(eng, 1, wl("w2", "a", 4, t=1, strategy="spread"))
    assert res.admitted[0].cluster == "bb"
    eng = engine([q("a", 0, 64)], [cluster("aa", price=2.0), cluster("bb", price=1.0)])
    assert run(eng, 0, wl("w", "a", 8)).admitted[0].cluster == "bb"
    eng = engine([q("a", 0, 64)], [cluster("aa"), cluster("bb", datasets=frozenset({"in"}))])
    assert run(eng, 0, wl("w", "a", 8, dataset="in")).admitted[0].cluster == "bb"


def test_unhealthy_cluster_is_skipped_and_named() -> None:
    eng = engine([q("a", 0, 64)], [cluster("aa", health=0.4), cluster("bb", health=0.9)])
    assert run(eng, 0, wl("w", "a", 8)).admitted[0].cluster == "bb"
    eng = engine([q("a", 0, 64)], [cluster("aa", health=0.4)])
    res = run(eng, 0, wl("w", "a", 8))
    assert res.reasons["w"].code == RC.CLUSTER_UNHEALTHY
    assert "aa 0.4" in res.reasons["w"].message
    eng.set_health("aa", 0.9)
    assert [a.workload for a in run(eng, 1).admitted] == ["w"]


def test_same_rack_topology() -> None:
    eng = engine([q("a", 0, 64)], [cluster(nodes=4, racks=["r1", "r2", "r2", "r1"])])
    run(eng, 0, wl("x", "a", 4))  # binpack: node 0 (r1), 4 free left there
    res = run(eng, 1, wl("g", "a", 8, count=2, t=1, topology_same="rack"))
    # r1 has 4 + 8 free: not enough for 2 x 8; r2 has 16 -> nodes 1 and 2.
    assert res.admitted[0].nodes == ("c-a100-80g-1", "c-a100-80g-2")
    eng = engine([q("a", 0, 64)], [cluster(nodes=2, racks=["r1", "r2"])])
    g2 = wl("g2", "a", 8, count=2, t=2, topology_same="rack")
    assert [r.code for r in eng.check(g2)] == [RC.TOPOLOGY_UNSATISFIABLE]
    res = run(eng, 2, g2)
    assert res.reasons["g2"].code == RC.TOPOLOGY_UNSATISFIABLE
    assert "not within one rack" in res.reasons["g2"].message


def test_cpu_pod_keeps_cores_for_free_gpus() -> None:
    # One GPU node: 8 GPUs, 40 cores; reserve 4 per free GPU -> a CPU-only pod may use 8 cores.
    eng = engine([q("a", 0, 64)], [cluster(nodes=1, cpu=40)])
    res = run(eng, 0, wl("cpu-big", "a", 0, cpu=10, flavors=(A100,)))
    assert res.admitted == [] and res.reasons["cpu-big"].code == RC.NO_CAPACITY
    res = run(eng, 1, wl("cpu-ok", "a", 0, cpu=8, t=1, flavors=(A100,)))
    assert [a.workload for a in res.admitted] == ["cpu-ok"]


def test_cpu_only_work_prefers_cpu_nodes() -> None:
    eng = engine([q("a", 0, 64)], [cluster("c", nodes=1), cluster("k", nodes=1, gpus=0,
                                                                  flavor="cpu")])
    res = run(eng, 0, wl("w", "a", 0, cpu=4, flavors=(A100, "cpu")))
    assert res.admitted[0].flavor == "cpu"


def test_nodes_down_and_flavor_unavailable() -> None:
    eng = engine([q("a", 0, 64)], [cluster("c", nodes=1)])
    eng.set_node_ready("c-a100-80g-0", False)
    res = run(eng, 0, wl("w", "a", 8))
    assert res.reasons["w"].code == RC.FLAVOR_UNAVAILABLE
    eng.set_node_ready("c-a100-80g-0", True)
    assert [a.workload for a in run(eng, 1).admitted] == ["w"]


def test_policy_restricted_clusters() -> None:
    eng = engine([q("a", 0, 64)], [cluster("aa"), cluster("bb")])
    res = run(eng, 0, wl("w", "a", 8, allowed_clusters=frozenset({"zz"}),
                         allowed_policy="east-only"))
    assert res.reasons["w"].code == RC.POLICY_DENIED
    res = run(eng, 0, wl("w2", "a", 8, allowed_clusters=frozenset({"bb"})))
    assert res.admitted[0].cluster == "bb"
