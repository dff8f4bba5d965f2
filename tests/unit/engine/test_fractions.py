"""Fractional GPUs (QUOTA-SEMANTICS §10): cards shared by fractions, memory slices, whole cards
kept off shared cards, rejection at submission, fragmentation-aware placement."""

from __future__ import annotations

import random

import pytest

from scheduling.engine import AdmittedWorkload, ReasonCode
from scheduling.engine.export import snapshot_of
from scheduling.engine.fragmentation import MILLI, Mix, fragment, lost
from scheduling.engine.pool import Pool, pod_of

from .builders import A100, GPU, cluster, engine, q, run, wl

RC = ReasonCode


def test_four_quarters_share_one_card_and_count_one_gpu() -> None:
    eng = engine([q("a", 0, 8)], [cluster(nodes=2, gpus=2)])
    res = run(eng, 0, *(wl(f"n{i}", "a", 0.25, t=i) for i in range(4)))  # type: ignore[arg-type]
    assert [(a.workload, a.nodes, a.cards, a.gpus) for a in res.admitted] == [
        (f"n{i}", ("c-a100-80g-0",), (0,), 0.25) for i in range(4)]
    leaf = eng.tree.index["a"]
    assert eng.tree.u[leaf][eng.tree.kidx[GPU]] == 1.0
    pool = eng.fleet.by_name["c"].pools[A100]
    # Card 0 is full (no compute, no memory left) and still shared; card 1 is whole and free.
    assert pool.fg == [1, 2] and pool.shared[0] == {0: [0.0, 0.0]}
    res = run(eng, 1, wl("n4", "a", 0.25, t=4))  # type: ignore[arg-type]
    assert res.admitted[0].cards == (1,)  # a second card opens on the same node


def test_a_memory_slice_keeps_a_card_from_a_second_fraction() -> None:
    # 0.3 + 0.3 of compute fit one card, but 50 + 50 GiB do not fit its 80 GiB.
    eng = engine([q("a", 0, 8)], [cluster(nodes=1, gpus=2)])
    res = run(eng, 0, wl("m1", "a", 0.3, gpu_memory_gib=50),  # type: ignore[arg-type]
              wl("m2", "a", 0.3, t=1, gpu_memory_gib=50))  # type: ignore[arg-type]
    assert [a.cards for a in res.admitted] == [(0,), (1,)]
    # Without a slice each takes its share of the card's memory (0.3 x 80 = 24 GiB): they share.
    eng = engine([q("a", 0, 8)], [cluster(nodes=1, gpus=2)])
    res = run(eng, 0, wl("d1", "a", 0.3), wl("d2", "a", 0.3, t=1))  # type: ignore[arg-type]
    assert [a.cards for a in res.admitted] == [(0,), (0,)]


def test_whole_card_pods_avoid_shared_cards() -> None:
    eng = engine([q("a", 0, 16)], [cluster(nodes=2, gpus=2)])
    run(eng, 0, wl("frac", "a", 0.1))  # type: ignore[arg-type]
    res = run(eng, 1, wl("two", "a", 2, t=1))
    assert res.admitted[0].nodes == ("c-a100-80g-1",) and res.admitted[0].cards == ()
    res = run(eng, 2, wl("another-two", "a", 2, t=2))
    # Node 0 has 1.9 GPUs free, but only one whole card.
    assert res.admitted == [] and res.reasons["another-two"].code == RC.NO_CAPACITY
    res = run(eng, 3, wl("one", "a", 1, t=3))
    assert res.admitted[0].nodes == ("c-a100-80g-0",)
    eng.end("frac", 4)  # the shared card is whole again
    res = eng.cycle(5)
    assert [a.workload for a in res.admitted] == []  # 1 card free on node 0: still not 2
    eng.end("one", 6)
    res = eng.cycle(7)
    assert [(a.workload, a.nodes) for a in res.admitted] == [("another-two", ("c-a100-80g-0",))]


def test_fractions_that_can_never_fit_are_rejected_at_submission() -> None:
    eng = engine([q("a", 0, 8)], [cluster(nodes=1, gpus=2)])
    reasons = eng.check(wl("big-slice", "a", 0.5, gpu_memory_gib=96))  # type: ignore[arg-type]
    assert [r.code for r in reasons] == [RC.GPU_MEMORY_INSUFFICIENT]
    assert "96" in reasons[0].message and "80" in reasons[0].message
    for bad, words in ((1.5, "whole number of cards"), (0.0005, "steps of 0.001"),
                       (0.12345, "steps of 0.001")):
        reasons = eng.check(wl("bad", "a", bad))  # type: ignore[arg-type]
        assert [r.code for r in reasons] == [RC.INVALID_REQUEST], bad
        assert words in reasons[0].message and "gpus" in reasons[0].message
    reasons = eng.check(wl("negative", "a", -0.5))  # type: ignore[arg-type]
    assert [r.code for r in reasons] == [RC.INVALID_REQUEST] and "< 0" in reasons[0].message
    assert eng.check(wl("ok", "a", 0.999)) == []  # type: ignore[arg-type]


def test_an_engine_rebuilt_from_its_snapshot_keeps_the_cards() -> None:
    from scheduling.engine import Engine

    eng = engine([q("a", 0, 8)], [cluster(nodes=1, gpus=2)])
    run(eng, 0, wl("x", "a", 0.6), wl("y", "a", 0.6, t=1))  # type: ignore[arg-type]
    snap = snapshot_of(eng, 2)
    assert sorted((a.workload.name, a.cards) for a in snap.admitted) == [
        ("x", (0,)), ("y", (1,))]
    again = Engine.from_snapshot(snap)
    pool = again.fleet.by_name["c"].pools[A100]
    assert sorted(pool.shared[0]) == [0, 1] and pool.fg == [0]
    # An admission stored without cards (older rows) is given the first card it fits.
    bare = engine([q("a", 0, 8)], [cluster(nodes=1, gpus=2)])
    bare.add_admitted(AdmittedWorkload(wl("z", "a", 0.5), "c", A100,  # type: ignore[arg-type]
                                       ("c-a100-80g-0",), borrowed=False, admitted_at=0.0))
    assert bare.fleet.by_name["c"].pools[A100].shared[0] == {0: [500.0, 40.0]}


def test_fragment_counts_what_the_mix_cannot_use() -> None:
    half = ((500, 1.0, 1.0, -1.0), 1.0)
    # One whole free card and a shared card with 0.3 free: 0.3 is a fragment for 0.5 pods.
    assert fragment((1, ((300, 24.0),), 16.0, 64.0, 80.0), (half,)) == 300
    # No CPU left: every free milli-GPU is a fragment.
    assert fragment((1, ((300, 24.0),), 0.5, 64.0, 80.0), (half,)) == 1300


def test_lost_adds_what_copies_of_the_usual_pods_cannot_fill_twice() -> None:
    one_card = ((1000, 12.0, 16.0, -1.0), 1.0)
    # Two free cards but cores for one pod of one card and 12 cores: FGD sees no fragment,
    # copies strand one card.
    node = (2, (), 16.0, 256.0, 80.0)
    assert fragment(node, (one_card,)) == 0 and lost(node, (one_card,)) == 2 * 1000
    # A card with 0.9 free takes one pod of 0.46: 0.44 is stranded, FGD counts none.
    share = ((460, 1.0, 1.0, -1.0), 1.0)
    node = (0, ((900, 72.0),), 16.0, 256.0, 80.0)
    assert fragment(node, (share,)) == 0 and lost(node, (share,)) == 2 * 440
    # A card with 0.19 free beside a free card: FGD counts the 0.19 lost to pods of 0.81;
    # copies of 0.81 leave 380 (one fills the free card), copies of 0.16 leave 70.
    mix = (((810, 1.0, 1.0, -1.0), 0.8), ((160, 1.0, 1.0, -1.0), 0.2))
    node = (1, ((190, 15.2),), 16.0, 256.0, 80.0)
    assert fragment(node, mix) == 0.8 * 190
    assert lost(node, mix) == pytest.approx(0.8 * 190 + 2 * (0.8 * 380 + 0.2 * 70))
    # No cores left, and a CPU-only shape: everything free is lost, to both measures.
    assert lost((1, ((190, 15.2),), 0.5, 256.0, 80.0), mix) == pytest.approx(3 * 1190)
    cpu_only = (((0, 4.0, 8.0, -1.0), 1.0),)
    assert fragment(node, cpu_only) == 1190 and lost(node, cpu_only) == 3 * 1190


def _pool(policy: str) -> Pool:
    pool = Pool("c", "g", 80.0, Mix())
    pool.add_node("n0", 2, 32.0, 256.0, "", True)
    pool.build_index()
    pool.policy = policy
    pool.take(0, pod_of(0.5, 1, 1, card=0))
    pool.take(0, pod_of(0.2, 1, 1, card=1))
    return pool


def test_fragmentation_aware_placement_keeps_room_for_the_usual_pods() -> None:
    # Card 0 has 0.5 free, card 1 0.8. Mostly halves arrive: a 0.2 pod best fits card 0
    # (leaving 0.3, useless to a half), which then leaves room for one of the two halves.
    arrivals = [0.2, 0.5, 0.5]
    placed = {}
    for policy in ("bestfit", ""):
        pool = _pool(policy)
        pool.mix.set_shares({(500, 1.0, 1.0, -1.0): 8, (200, 1.0, 1.0, -1.0): 2})
        placed[policy] = [pool.place([pod_of(g, 1, 1)], False, 0.0, None) is not None
                          for g in arrivals]
    assert placed["bestfit"] == [True, True, False]
    assert placed[""] == [True, True, True]


def _fill(policy: str, seed: int) -> float:
    """A 16-node, 4-card fleet filled to 130% by a seeded mix; the GPU allocation ratio."""
    mix = [((0.2, 4.0), 4), ((0.5, 1.0), 2), ((1.0, 4.0), 2)]
    pool = Pool("c", "g")
    for i in range(16):
        pool.add_node(f"n{i}", 4, 32.0, 256.0, "", True)
    pool.build_index()
    pool.policy = policy
    rng = random.Random(seed)
    placed = asked = 0
    while asked < 16 * 4 * MILLI * 1.3:
        gpus, cpu = rng.choices([s for s, _ in mix], [w for _, w in mix])[0]
        milli = int(gpus * MILLI)
        pool.mix.record((milli, cpu, 8.0, -1.0))
        if pool.place([pod_of(gpus, cpu, 8.0)], False, 0.0, None) is not None:
            placed += milli
        asked += milli
    return placed / (16 * 4 * MILLI)


def test_fragmentation_aware_placement_beats_best_fit_on_a_synthetic_mix() -> None:
    seeds = range(4)
    best_fit = sum(_fill("bestfit", s) for s in seeds) / len(seeds)
    allot = sum(_fill("", s) for s in seeds) / len(seeds)
    assert allot > best_fit + 0.005, (allot, best_fit)
