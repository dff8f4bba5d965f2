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


def test_an_overcommitted_node_has_no_free_gpus_and_does_not_break_the_cycle() -> None:
    # The node reports fewer GPUs than the workloads on it hold (it shrank, or a release is
    # not confirmed yet): the cycle must go on, count the node as full, and place elsewhere.
    from scheduling.engine import AdmittedWorkload

    eng = engine([q("a", 0, 64)], [cluster(nodes=4)])
    node = "c-a100-80g-0"
    for i, gpus in enumerate((8, 8, 4)):  # 20 GPUs held on an 8-GPU node
        eng.add_admitted(AdmittedWorkload(wl(f"held{i}", "a", gpus), "c", A100, (node,),
                                          borrowed=False, admitted_at=0.0, admission_seq=i))
    eng.refresh_capacity()
    res = run(eng, 1, wl("new", "a", 8, t=1), wl("more", "a", 1, t=1.5))
    assert [(a.workload, a.nodes) for a in res.admitted] == [
        ("new", ("c-a100-80g-1",)), ("more", ("c-a100-80g-2",))]
    # Ending what was held gives the node back only as far as it has GPUs: 8 - 4 = 4 free.
    eng.end("held0", 2)
    eng.end("held1", 2)
    res = run(eng, 3, wl("five", "a", 5, t=3), wl("four", "a", 4, t=3.5),
              wl("three", "a", 3, t=4))
    assert [(a.workload, a.nodes) for a in res.admitted] == [
        ("five", ("c-a100-80g-2",)), ("four", (node,)), ("three", ("c-a100-80g-3",))]
