"""Preemption (§5): reclaim, priority, no preemption in vain, minimal sets, budgets, grace."""

from __future__ import annotations

from scheduling.engine import DisruptionBudget, PreemptionKind, ReasonCode

from .builders import cluster, engine, q, run, wl

RC = ReasonCode


def _borrowed_setup(**settings: object):  # type: ignore[no-untyped-def]
    eng = engine([q("a", 8, 32), q("b", 16, 32)], [cluster(nodes=3, gpus=8)], **settings)
    run(eng, 0, wl("a1", "a", 8, t=0))
    run(eng, 1, wl("a2", "a", 8, t=1), wl("a3", "a", 4, t=2), wl("a4", "a", 4, t=3))
    return eng


def test_reclaim_picks_most_recent_minimal_victims_and_waits() -> None:
    eng = _borrowed_setup()
    # a uses 24 (min 8): a2, a3, a4 borrowed. b (min 16) asks 8: fleet full.
    res = run(eng, 10, wl("b1", "b", 8, t=10))
    victims = sorted(p.workload for p in res.preempted)
    # Most recently admitted first: a4, then a3 (4 + 4 = 8 GPUs on one node) suffice.
    assert victims == ["a3", "a4"]
    assert {p.kind for p in res.preempted} == {PreemptionKind.RECLAIM}
    assert all(p.grace_until == 40 for p in res.preempted)
    assert res.reasons["b1"].code == RC.WAITING_FOR_PREEMPTION
    assert eng.cooldown[eng.tree.index["a"]] == 130
    # Capacity counts as used during the grace period: nothing admitted yet.
    assert run(eng, 20).admitted == []
    assert run(eng, 20).preempted == []  # no second round of victims while waiting
    eng.end("a3", 40)
    eng.end("a4", 40)
    res = run(eng, 40)
    assert [a.workload for a in res.admitted] == ["b1"]


def test_reclaim_never_takes_a_queue_below_its_min() -> None:
    eng = engine([q("a", 8, 32), q("b", 8, 32)], [cluster(nodes=2)])
    run(eng, 0, wl("a1", "a", 8), wl("a2", "a", 8, t=1))
    eng.end("a1", 5)  # a now uses 8 = its min: not borrowing
    run(eng, 5, wl("a3", "a", 8, t=5))
    res = run(eng, 10, wl("b1", "b", 16, t=10))
    # b1 (16 > min 8) would borrow: no reclaim, and a is not above min after one victim.
    assert res.preempted == []


def test_no_preemption_in_vain() -> None:
    # b1 needs 16 GPUs on one 16-GPU node; a's borrowed work sits on both 8-GPU nodes.
    eng = engine([q("a", 0, 16), q("b", 16, 16)], [cluster(nodes=2, gpus=8)])
    run(eng, 0, wl("a1", "a", 8), wl("a2", "a", 8, t=1))
    res = run(eng, 10, wl("b1", "b", 16, t=10))
    assert res.preempted == []  # rejected at submission in practice; here: nobody preempted
    assert res.reasons["b1"].code in (RC.NO_CAPACITY, RC.QUOTA_BORROW_UNAVAILABLE)


def test_priority_preemption_only_by_can_preempt_classes() -> None:
    eng = engine([q("a", 8, 8)], [cluster(nodes=1)])
    run(eng, 0, wl("batch", "a", 8, priority=100, priority_class="batch-low"))
    res = run(eng, 5, wl("train", "a", 8, t=5, priority=1000))
    assert res.preempted == []
    res = run(eng, 6, wl("inf", "a", 8, t=6, priority=10000, priority_class="inference-high",
                         can_preempt=True))
    assert [(p.workload, p.by, p.kind) for p in res.preempted] == [
        ("batch", "inf", PreemptionKind.PRIORITY)]
    assert "inference-high 10000 > batch-low 100" in res.preempted[0].reason.message


def test_non_preemptible_victims_are_never_chosen() -> None:
    eng = engine([q("a", 8, 8)], [cluster(nodes=1)])
    run(eng, 0, wl("keep", "a", 8, priority=100, preemptible=False))
    res = run(eng, 6, wl("inf", "a", 8, t=6, priority=10000, can_preempt=True))
    assert res.preempted == []


def test_disruption_budget_blocks_a_victim() -> None:
    eng = engine([q("a", 8, 32), q("b", 8, 32)], [cluster(nodes=2)])
    eng.budgets = [DisruptionBudget({"app": "serving"}, 2, name="serving")]
    run(eng, 0, wl("a1", "a", 8, labels={"app": "serving"}),
        wl("a2", "a", 8, t=1, labels={"app": "serving"}))
    res = run(eng, 10, wl("b1", "b", 8, t=10))
    assert res.preempted == []
    r = res.reasons["b1"]
    assert r.code == RC.BUDGET_EXCEEDED
    assert "leave 1 running pods < min_available 2" in r.message


def test_lca_rule_keeps_victims_whose_department_is_within_min() -> None:
    # rd (min 16) holds vision (min 8) and nlp (min 8); ops (min 16). Fleet 32.
    queues = [q("rd", 16, 32), q("rd/vision", 8, 32), q("rd/nlp", 8, 32), q("ops", 16, 32)]
    eng = engine(queues, [cluster(nodes=4)])
    run(eng, 0, wl("n1", "rd/nlp", 8), wl("n2", "rd/nlp", 8, t=1), wl("o1", "ops", 8, t=2),
        wl("o2", "ops", 8, t=3))
    # nlp borrows 8 from vision inside rd; rd is at its min (16): ops cannot reclaim from nlp
    # (rd is not above min), but vision can (their LCA is rd).
    res = run(eng, 10, wl("v1", "rd/vision", 8, t=10))
    assert [(p.workload, p.by) for p in res.preempted] == [("n2", "v1")]
