"""Node capacity held by ended workloads not yet confirmed gone (`HeldCapacity`), for shapes
other than whole cards: a fraction keeps its share and memory slice of its card, extended
resources (MIG slices) stay taken on the node; neither counts in any quota."""

from __future__ import annotations

from scheduling.engine import (
    ClusterSpec,
    FlavorSpec,
    HeldCapacity,
    NodeSpec,
    PodSetSpec,
    ReasonCode,
    Snapshot,
    WorkloadSpec,
    schedule,
)

from .builders import A100, q

RC = ReasonCode
MIG = "nvidia.com/mig-1g.10gb"
NODE = "c-0"


def one_node(gpus: int = 1, resources: tuple[tuple[str, float], ...] = ()) -> ClusterSpec:
    return ClusterSpec("c", (NodeSpec(NODE, A100, gpus, 96, 1024, resources=resources),))


def pod(name: str, gpus: float, t: float = 1, gpu_memory_gib: float | None = None,
        resources: tuple[tuple[str, float], ...] = ()) -> WorkloadSpec:
    return WorkloadSpec(name, "a", (PodSetSpec(1, (A100,), gpus, 1, 8, gpu_memory_gib,
                                               resources=resources),), submitted_at=t)


def snap(pending: tuple[WorkloadSpec, ...], held: tuple[HeldCapacity, ...],
         cluster: ClusterSpec | None = None) -> Snapshot:
    return Snapshot(now=10, queues=(q("a", 8, 8),), clusters=(cluster or one_node(),),
                    pending=pending, held=held, flavors=(FlavorSpec(A100, 80),))


def test_a_held_fraction_keeps_its_share_of_its_card() -> None:
    """0.75 of card 0 held: a 0.5 pod does not fit the card's 0.25 left, nor may a whole-card
    pod take the card; a 0.25 pod goes on that card beside the held share."""
    held = (HeldCapacity("c", NODE, fractions=((0.75, -1.0, 0),)),)
    res = schedule(snap((pod("half", 0.5),), held))
    assert res.admitted == []
    assert res.reasons["half"].code == RC.NO_CAPACITY
    assert "QUOTA" not in res.reasons["half"].message
    res = schedule(snap((pod("whole", 1),), held))
    assert res.admitted == [] and res.reasons["whole"].code == RC.NO_CAPACITY
    assert "0.75 GPUs still held by ended workloads" in res.reasons["whole"].message
    res = schedule(snap((pod("quarter", 0.25),), held))
    assert [(a.workload, a.cards) for a in res.admitted] == [("quarter", (0,))]
    # Without the hold the half fits: the hold, not the quota, stopped it.
    assert [a.workload for a in schedule(snap((pod("half", 0.5),), ())).admitted] == ["half"]


def test_a_held_memory_slice_counts_on_its_card() -> None:
    """A held 0.25 with a 70 GiB slice of an 80 GiB card leaves 10 GiB: a 0.25 pod asking
    20 GiB does not fit the card though its share would."""
    held = (HeldCapacity("c", NODE, fractions=((0.25, 70.0, 0),)),)
    res = schedule(snap((pod("q20", 0.25, gpu_memory_gib=20),), held))
    assert res.admitted == [] and res.reasons["q20"].code == RC.NO_CAPACITY
    res = schedule(snap((pod("q10", 0.25, gpu_memory_gib=10),), held))
    assert [(a.workload, a.cards) for a in res.admitted] == [("q10", (0,))]


def test_held_mig_slices_stay_taken_on_the_node() -> None:
    """5 of a node's 7 MIG slices held: a pod asking 3 waits, one asking 2 runs."""
    cluster = one_node(gpus=0, resources=((MIG, 7.0),))
    held = (HeldCapacity("c", NODE, resources=((MIG, 5.0),)),)
    res = schedule(snap((pod("three", 0, resources=((MIG, 3.0),)),), held, cluster))
    assert res.admitted == [] and res.reasons["three"].code == RC.NO_CAPACITY
    assert (f"{MIG}: 3 per pod, at most 2 free on a node; 5 {MIG} still held by ended "
            "workloads") in res.reasons["three"].message
    res = schedule(snap((pod("two", 0, resources=((MIG, 2.0),)),), held, cluster))
    assert [a.workload for a in res.admitted] == ["two"]


def test_a_hold_never_takes_a_node_below_empty() -> None:
    """Held beyond what is free (a full card, more slices than the node has): the node is
    full, never negative; once the hold is gone the node takes work again."""
    cluster = one_node(gpus=1, resources=((MIG, 7.0),))
    held = (HeldCapacity("c", NODE, gpus=1, fractions=((0.5, -1.0, 0),),
                         resources=((MIG, 9.0),)),)
    res = schedule(snap((pod("slice", 0, resources=((MIG, 1.0),)),), held, cluster))
    assert res.admitted == []
    res = schedule(snap((pod("slice", 0, resources=((MIG, 1.0),)),), (), cluster))
    assert [a.workload for a in res.admitted] == ["slice"]
