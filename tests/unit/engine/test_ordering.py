"""The candidate order (§4.2): guarantee before borrowers, borrow score, priority, FIFO, name."""

from __future__ import annotations

from scheduling.engine import ReasonCode

from .builders import cluster, engine, q, run, wl

RC = ReasonCode


def test_within_guarantee_first_then_fifo() -> None:
    eng = engine([q("a", 8, 16), q("b", 8, 16)], [cluster(nodes=1)])
    res = run(eng, 0, wl("a-borrow", "a", 8, t=0), wl("a-1", "a", 8, t=1),
              wl("b-1", "b", 8, t=2))
    # One node: a-1 and b-1 would be within guarantee (0 + 8 <= 8); a-borrow too (it is a's
    # first). FIFO among within-guarantee: a-borrow first.
    assert [a.workload for a in res.admitted] == ["a-borrow"]
    assert res.reasons["a-1"].code == RC.NO_CAPACITY


def test_borrower_waits_behind_guarantee_even_if_earlier() -> None:
    eng = engine([q("a", 8, 16), q("b", 8, 16)], [cluster(nodes=2)])
    run(eng, 0, wl("a1", "a", 8))
    res = run(eng, 1, wl("a2", "a", 8, t=1), wl("b1", "b", 8, t=5))
    # a2 would borrow; b1 is within guarantee and goes first although submitted later.
    assert [a.workload for a in res.admitted] == ["b1"]
    assert res.reasons["a2"].code in (RC.NO_CAPACITY, RC.QUOTA_BORROW_UNAVAILABLE)


def test_borrow_score_prefers_low_attainment_and_good_repayment() -> None:
    queues = [q("a", 8, 32), q("b", 16, 32), q("c", 8, 32)]
    eng = engine(queues, [cluster(nodes=4)])
    run(eng, 0, wl("a0", "a", 8), wl("b0", "b", 8), wl("c0", "c", 8))
    # attainment: a 8/8 = 1, b 8/16 = 0.5 (b1 is within guarantee: 8 + 8 <= 16),
    # so add b1 now to leave b at 16/16 and give c a forced repayment history.
    eng.record_repayment("c", 0.0, forced=True)
    res = run(eng, 1, wl("a1", "a", 8, t=1), wl("c1", "c", 8, t=1))
    # a: score 1*(1-1) + 0.5*1 = 0.5; c: 0 + 0.5*0 = 0 -> a first; one node left.
    assert [a.workload for a in res.admitted] == ["a1"]
    assert res.admitted[0].borrowed


def test_priority_then_fifo_then_name() -> None:
    eng = engine([q("a", 0, 64)], [cluster(nodes=1)])
    res = run(eng, 0, wl("z", "a", 8, t=5, priority=100), wl("y", "a", 8, t=5, priority=100),
              wl("x", "a", 8, t=9, priority=1000))
    assert [a.workload for a in res.admitted] == ["x"]
    eng.end("x", 1)
    res = run(eng, 1)
    assert [a.workload for a in res.admitted] == ["y"]
