"""Node-level placement (§7): binpack and spread nodes, the CPU reserve, gangs over nodes."""

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


def test_cpu_pod_keeps_cores_for_free_gpus() -> None:
    # One GPU node: 8 GPUs, 40 cores; reserve 4 per free GPU -> a CPU-only pod may use 8 cores.
    eng = engine([q("a", 0, 64)], [cluster(nodes=1, cpu=40)])
    res = run(eng, 0, wl("cpu-big", "a", 0, cpu=10, flavors=(A100,)))
    assert res.admitted == [] and res.reasons["cpu-big"].code == RC.NO_CAPACITY
    res = run(eng, 1, wl("cpu-ok", "a", 0, cpu=8, t=1, flavors=(A100,)))
    assert [a.workload for a in res.admitted] == ["cpu-ok"]


def test_gang_spans_nodes() -> None:
    eng = engine([q("a", 0, 64)], [cluster("c", nodes=3)])
    res = run(eng, 0, wl("gang", "a", 4, count=4))
    assert res.admitted[0].nodes == ("c-a100-80g-0", "c-a100-80g-0", "c-a100-80g-1",
                                     "c-a100-80g-1")
