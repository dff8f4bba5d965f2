"""The engine's state across cycles: the repayment history (§6), a cycle on a snapshot, node
capacity held by ended workloads."""

from __future__ import annotations

from scheduling.engine import HeldCapacity, ReasonCode, RepaymentRecord, Snapshot, schedule

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


def test_held_capacity_takes_its_node_but_no_quota() -> None:
    """An ended workload whose pods the cluster has not confirmed gone keeps its node: an
    8-GPU workload is not placed on a node whose 8 GPUs it holds, though the quota is free."""
    snap = Snapshot(now=10, queues=(q("a", 8, 8),), clusters=(cluster(nodes=1),),
                    pending=(wl("next", "a", 8, t=1),),
                    held=(HeldCapacity("c", "c-a100-80g-0", gpus=8, cpu=8, memory_gib=64),))
    res = schedule(snap)
    assert res.admitted == []
    reason = res.reasons["next"]
    assert reason.code == RC.NO_CAPACITY
    assert "most free: c 0 GPUs" in reason.message
    assert "8 GPUs still held by ended workloads" in reason.message
    # Quota is not what stops it: a queue at its max of 8 would say QUOTA_MAX.
    assert "QUOTA" not in reason.message
    # Held on another node, or on a node that is gone, it takes nothing from this one.
    for held in (HeldCapacity("c", "elsewhere", gpus=8), HeldCapacity("other", "c-a100-80g-0",
                                                                       gpus=8)):
        assert [a.workload for a in schedule(
            Snapshot(now=10, queues=snap.queues, clusters=snap.clusters, pending=snap.pending,
                     held=(held,))).admitted] == ["next"]


def test_held_capacity_never_takes_a_node_below_empty() -> None:
    """A node already over-committed (held beside an admitted workload) stays full, not
    negative: the next workload on another node is placed as usual."""
    snap = Snapshot(now=10, queues=(q("a", 0, 32),), clusters=(cluster(nodes=2),),
                    pending=(wl("next", "a", 8, t=1),),
                    held=(HeldCapacity("c", "c-a100-80g-0", gpus=12),))
    res = schedule(snap)
    assert [(a.workload, a.nodes) for a in res.admitted] == [("next", ("c-a100-80g-1",))]
