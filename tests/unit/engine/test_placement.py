"""Cluster-level placement (§7): cluster score, health, racks, gangs in one cluster, flavors
without ready nodes, clusters allowed by policy."""

from __future__ import annotations

from scheduling.engine import ReasonCode

from .builders import cluster, engine, q, run, wl

RC = ReasonCode


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


def test_gang_all_or_nothing_in_one_cluster() -> None:
    eng = engine([q("a", 0, 64)], [cluster("c", nodes=1), cluster("d", nodes=1)])
    res = run(eng, 0, wl("gang", "a", 8, count=2))
    assert res.admitted == []
    assert eng.check(wl("gang", "a", 8, count=2))[0].code == RC.NO_CAPACITY
    assert all(sum(p.fg) == 8 for c in eng.fleet.clusters for p in c.pools.values())
