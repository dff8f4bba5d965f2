"""The engine's state across cycles: the repayment history (§6), a cycle on a snapshot."""

from __future__ import annotations

from scheduling.engine import ReasonCode, RepaymentRecord, Snapshot, schedule

from .builders import cluster, engine, q, wl

RC = ReasonCode


def test_repayment_window_and_default() -> None:
    eng = engine([q("a", 8, 16)], [cluster()], repayment_window_s=100.0)
    leaf = eng.tree.index["a"]
    assert eng.repayment(leaf, 0) == 1.0
    for at, forced in [(0.0, True), (50.0, False), (60.0, False), (70.0, True)]:
        eng.record_repayment("a", at, forced=forced)
    assert eng.repayment(leaf, 80) == 0.5
    assert eng.repayment(leaf, 155) == 0.5  # (0, forced) left the window: 2 returned, 1 forced
    assert eng.repayment(leaf, 10_000) == 1.0


def test_schedule_on_snapshot_is_deterministic() -> None:
    snap = Snapshot(now=10, queues=(q("a", 8, 16), q("b", 8, 16)),
                    clusters=(cluster(nodes=2),),
                    pending=(wl("a1", "a", 8, t=1), wl("b1", "b", 8, t=1), wl("a2", "a", 8, t=0)),
                    repayment=(RepaymentRecord("a", 5.0, True),))
    first, second = schedule(snap), schedule(snap)
    assert first == second
    assert [a.workload for a in first.admitted] == ["a2", "b1"]
    assert first.reasons["a1"].code in (RC.NO_CAPACITY, RC.QUOTA_BORROW_UNAVAILABLE)
