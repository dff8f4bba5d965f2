"""Trying one workload (§4.3-§4.5): flavors in order, non-preemptible work, cooldowns."""

from __future__ import annotations

from scheduling.engine import ReasonCode

from .builders import A100, cluster, engine, q, run, wl

RC = ReasonCode


def test_flavors_in_order_without_then_with_borrowing() -> None:
    queues = [q("a", 8, 16, flavor=A100), q("b", 8, 16, flavor=A100)]
    v100 = ("v100-32g", "gpu")
    from scheduling.engine import KeyQuota, QueueSpec
    queues = [QueueSpec("a", None, {(A100, "gpu"): KeyQuota(8, 16, 8), v100: KeyQuota(8, 16, 8)}),
              QueueSpec("b", None, {(A100, "gpu"): KeyQuota(8, 16, 8), v100: KeyQuota(8, 16, 8)})]
    eng = engine(queues, [cluster("c", nodes=2), cluster("d", nodes=2, flavor="v100-32g")])
    flav = (A100, "v100-32g")
    res = run(eng, 0, wl("w1", "a", 8, flavors=flav), wl("w2", "a", 8, t=1, flavors=flav),
              wl("w3", "a", 8, t=2, flavors=flav))
    got = {a.workload: (a.flavor, a.borrowed) for a in res.admitted}
    # w1: a100 within guarantee; w2: a100 would borrow, v100 is within guarantee -> v100;
    # w3: both borrow -> first flavor with borrowing: a100.
    assert got == {"w1": (A100, False), "w2": ("v100-32g", False), "w3": (A100, True)}


def test_non_preemptible_never_borrows() -> None:
    eng = engine([q("a", 8, 32)], [cluster(nodes=4)])
    run(eng, 0, wl("a1", "a", 8))
    res = run(eng, 1, wl("np", "a", 8, t=1, preemptible=False))
    assert res.admitted == []
    r = res.reasons["np"]
    assert r.code == RC.NON_PREEMPTIBLE_BEYOND_MIN
    assert r.message == ("queue a a100-80g/gpu: non-preemptible, used 8 + requested 8 > min 8")


def test_cooldown_blocks_borrowing_not_guarantee() -> None:
    eng = engine([q("a", 8, 24), q("b", 8, 24)], [cluster(nodes=3)], reclaim_cooldown_s=120)
    a = eng.tree.index["a"]
    eng.cooldown[a] = 120.0
    res = run(eng, 0, wl("g", "a", 8), wl("borrow", "a", 8, t=1))
    assert [x.workload for x in res.admitted] == ["g"]
    r = res.reasons["borrow"]
    assert r.code == RC.COOLDOWN and "until 120" in r.message
    res = run(eng, 120)
    assert [x.workload for x in res.admitted] == ["borrow"]
