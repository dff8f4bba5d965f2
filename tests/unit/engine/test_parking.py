"""Groups and parking are an optimisation only: an engine that groups identical pending
workloads and parks failed groups decides exactly what an engine that evaluates every pending
workload on its own in every cycle decides (hypothesis, random trees, fleets and streams with
many identical workloads)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import (
    ClusterSpec,
    Engine,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    Settings,
    WorkloadSpec,
)

FLAVORS = ("a100-80g", "v100-32g")


@st.composite
def streams(draw: Any) -> dict[str, Any]:
    """A flat or two-level tree, a small fleet, and a stream drawn from a few shapes (so many
    pending workloads are identical and share a group)."""
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    for t in range(draw(st.integers(1, 3))):
        quota = {}
        for f in FLAVORS:
            mn = draw(st.integers(0, 12))
            quota[(f, "gpu")] = KeyQuota(mn, draw(st.sampled_from([mn, mn + 8, 40])), mn)
        path = f"t{t}"
        queues.append(QueueSpec(path, None, quota))
        if draw(st.booleans()):
            leaves.append(path)
            continue
        for c in range(2):
            kq = {(f, "gpu"): KeyQuota(quota[(f, "gpu")].min // 2, quota[(f, "gpu")].max,
                                       quota[(f, "gpu")].min // 2) for f in FLAVORS}
            queues.append(QueueSpec(f"{path}/c{c}", path, kq))
            leaves.append(f"{path}/c{c}")
    nodes = []
    for f in FLAVORS:
        for i in range(draw(st.integers(1, 3))):
            nodes.append(NodeSpec(f"k-{f}-{i}", f, draw(st.sampled_from([4, 8])), 64, 512,
                                  f"r{i % 2}"))
    shapes = []
    for _ in range(draw(st.integers(1, 4))):
        flavors = tuple(draw(st.permutations(FLAVORS))[:draw(st.integers(1, 2))])
        prio, can = draw(st.sampled_from([(100, False), (1000, False), (10000, True)]))
        shapes.append((draw(st.sampled_from(leaves)),
                       PodSetSpec(draw(st.integers(1, 2)), flavors,
                                  draw(st.sampled_from([1, 2, 4, 8])), 4, 16),
                       prio, can, draw(st.sampled_from([True, True, False])),
                       draw(st.sampled_from(["", "", "rack"]))))
    steps = []
    n = 0
    for step in range(draw(st.integers(3, 10))):
        batch = []
        for _ in range(draw(st.integers(0, 6))):
            n += 1
            leaf, ps, prio, can, preemptible, topo = draw(st.sampled_from(shapes))
            batch.append(WorkloadSpec(f"w{n}", leaf, (ps,), submitted_at=float(step),
                                      priority=prio, can_preempt=can, preemptible=preemptible,
                                      termination_grace_s=draw(st.sampled_from([0, 1])),
                                      topology_same=topo))
        steps.append((batch, draw(st.lists(st.integers(0, 100), max_size=3))))
    return {"queues": queues, "clusters": [ClusterSpec("k", tuple(nodes))], "steps": steps}


def _decisions(world: dict[str, Any], parking: bool) -> list[Any]:
    eng = Engine(queues=world["queues"], clusters=world["clusters"],
                 flavors=(FlavorSpec("a100-80g", 80), FlavorSpec("v100-32g", 32)),
                 settings=Settings(reclaim_cooldown_s=2, starvation_s=3), parking=parking)
    log: list[Any] = []
    # Two quiet steps after the stream: starvation and cooldowns run out with no new events.
    steps = [*world["steps"], ([], []), ([], [])]
    for step, (batch, finish) in enumerate(steps):
        now = float(step)
        for a in sorted(eng.admitted.values(), key=lambda a: a.name):
            if a.grace_until is not None and a.grace_until <= now:
                eng.end(a.name, now)
                eng.submit(a.spec)
        names = sorted(eng.admitted)
        for i in finish:
            name = names[i % len(names)] if names else ""
            a = eng.admitted.get(name)
            if a is not None and a.grace_until is None:
                eng.end(name, now)
        for w in batch:
            if not eng.check(w):
                eng.submit(w)
        res = eng.cycle(now)
        for a in res.admitted:
            eng.mark_running(a.workload)
        log.append((step,
                    [(a.workload, a.cluster, a.flavor, a.nodes, a.borrowed) for a in res.admitted],
                    sorted((p.workload, p.by, str(p.kind)) for p in res.preempted)))
    return log


# Derandomized: a fixed set of 150 examples, so CI runs the same ones every time (the
# counterexamples below were found with random seeds and 1,000 to 4,000 examples).
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_parking_decides_like_a_full_evaluation(world: dict[str, Any]) -> None:
    assert _decisions(world, parking=True) == _decisions(world, parking=False)


# ---- counterexamples hypothesis found, always checked --------------------------------------

def _fleet(a100: tuple[int, ...], v100: tuple[int, ...]) -> list[ClusterSpec]:
    nodes = [NodeSpec(f"k-{f}-{i}", f, gpus, 64, 512, f"r{i % 2}")
             for f, sizes in (("a100-80g", a100), ("v100-32g", v100))
             for i, gpus in enumerate(sizes)]
    return [ClusterSpec("k", tuple(nodes))]


def _q(path: str, parent: str | None, a100: tuple[int, int],
       v100: tuple[int, int]) -> QueueSpec:
    return QueueSpec(path, parent, {("a100-80g", "gpu"): KeyQuota(a100[0], a100[1], a100[0]),
                                    ("v100-32g", "gpu"): KeyQuota(v100[0], v100[1], v100[0])})


def _w(n: int, queue: str, step: int, flavors: tuple[str, ...], gpus: int,
       priority: int = 100, can_preempt: bool = False, preemptible: bool = True) -> WorkloadSpec:
    return WorkloadSpec(f"w{n}", queue, (PodSetSpec(1, flavors, gpus, 4, 16),),
                        submitted_at=float(step), priority=priority, can_preempt=can_preempt,
                        preemptible=preemptible, termination_grace_s=0)


A, V, AV = ("a100-80g",), ("v100-32g",), ("a100-80g", "v100-32g")


def _step(log: list[Any], step: int) -> tuple[list[str], list[str]]:
    _, admitted, preempted = log[step]
    return [a[0] for a in admitted], [p[0] for p in preempted]


def test_held_back_starving_group_is_tried_when_its_holder_is_admitted() -> None:
    """w7..w9 (1 GPU, a100) are held back at step 7 by starving w6's hold on a100; w6 is
    admitted on v100 at step 8 and holds nothing, so w7 takes the free a100 GPU. The held-back
    group also starved, and was only made to hold again, never tried."""
    world = {"queues": [_q("t0", None, (0, 8), (0, 8))], "clusters": _fleet((4,), (4,)),
             "steps": [([_w(1, "t0", 0, A, 1)], []),
                       ([_w(2, "t0", 1, A, 1), _w(3, "t0", 1, A, 1)], []),
                       ([_w(4, "t0", 2, A, 1), _w(5, "t0", 2, AV, 4), _w(6, "t0", 2, AV, 4),
                         _w(7, "t0", 2, A, 1), _w(8, "t0", 2, A, 1), _w(9, "t0", 2, A, 1)], []),
                       ([], []), ([], []), ([], []), ([], []), ([], [0]), ([], [3])]}
    log = _decisions(world, parking=True)
    assert _step(log, 8) == (["w6", "w7"], [])
    assert log == _decisions(world, parking=False)


def test_parked_priority_preemptor_wakes_when_capacity_elsewhere_frees() -> None:
    """w3 (8 GPUs, can preempt) needs its own leaf's w1, w4, w5 and 1 more free GPU; w2 of
    the sibling leaf ending at step 2 frees it (less than w3's deficit without victims)."""
    kids = (0, 0), (1, 10)
    world = {"queues": [_q("t1", None, (0, 0), (2, 10)), _q("t1/c0", "t1", *kids),
                        _q("t1/c1", "t1", *kids)],
             "clusters": _fleet((4,), (8,)),
             "steps": [([_w(1, "t1/c0", 0, AV, 1), _w(2, "t1/c1", 0, AV, 1),
                         _w(3, "t1/c0", 0, AV, 8, priority=10000, can_preempt=True),
                         _w(4, "t1/c0", 0, AV, 1), _w(5, "t1/c0", 0, AV, 1)], []),
                       ([], []), ([], [1])]}
    log = _decisions(world, parking=True)
    assert _step(log, 2) == ([], ["w1", "w4", "w5"])
    assert _step(log, 3) == (["w3"], [])
    assert log == _decisions(world, parking=False)


def test_parked_reclaimer_wakes_when_an_admission_makes_a_parent_borrow() -> None:
    """w11 fits within its leaf's min but pushes its parent t2 over its min, so t2/c0's w5
    becomes reclaimable: w9, within t0/c0's guarantee, reclaims it at step 6."""
    world = {"queues": [_q("t0", None, (0, 0), (8, 8)), _q("t0/c0", "t0", (0, 0), (4, 8)),
                        _q("t0/c1", "t0", (0, 0), (4, 8)),
                        _q("t2", None, (0, 0), (5, 13)), _q("t2/c0", "t2", (0, 0), (2, 13)),
                        _q("t2/c1", "t2", (0, 0), (2, 13))],
             "clusters": _fleet((4,), (4, 4)),
             "steps": [([], []), ([_w(5, "t2/c0", 1, AV, 4)], []), ([], []),
                       ([_w(6, "t2/c1", 3, AV, 1), _w(9, "t0/c0", 3, AV, 2),
                         _w(10, "t0/c0", 3, AV, 2)], []),
                       ([], []), ([_w(11, "t2/c1", 5, AV, 1)], [])]}
    log = _decisions(world, parking=True)
    assert _step(log, 6) == ([], ["w5"])
    assert _step(log, 7) == (["w9"], [])
    assert log == _decisions(world, parking=False)


def test_identical_preemptors_after_a_failing_member() -> None:
    """Found by hypothesis (seed 25, 1000 examples): w4..w8 (1 GPU, can preempt, not
    preemptible) form one group; at step 5 w4 preempts w3, w5 fails (waiting on a100 for w3),
    w2 is admitted, and then w6 no longer waits on a100 and preempts w10 on v100. The group
    used to be parked after w5."""
    c0 = (2, 5), (2, 4)
    world = {"queues": [_q("t0", None, (5, 5), (4, 4)), _q("t0/c0", "t0", *c0),
                        _q("t0/c1", "t0", *c0)],
             "clusters": _fleet((4, 4), (4,)),
             "steps": [([_w(1, "t0/c0", 0, AV, 1, 10000, True, False), _w(2, "t0/c0", 0, AV, 2),
                         _w(3, "t0/c0", 0, AV, 2)], []),
                       ([], []), ([], []),
                       ([_w(n, "t0/c0", 3, AV, 1, 10000, True, False) for n in range(4, 9)]
                        + [_w(9, "t0/c0", 3, AV, 2)], []),
                       ([_w(10, "t0/c0", 4, AV, 2)], [])]}
    full = _decisions(world, parking=False)
    assert _step(full, 5) == (["w2", "w9"], ["w10", "w3"])
    assert _decisions(world, parking=True) == full


def test_member_after_one_that_took_a_hold_is_tried() -> None:
    """w4..w9 (2 GPUs, can preempt) are one group; at step 8 w4 preempts w10..w12, w5 fails
    waiting on a100 and, starving, holds a100; w6 then goes on to v100 and preempts w14. The
    group used to be parked after w5."""
    c0 = (4, 16), (2, 4)
    hi = {"priority": 10000, "can_preempt": True, "preemptible": False}
    world = {"queues": [_q("t0", None, (8, 16), (4, 4)), _q("t0/c0", "t0", *c0),
                        _q("t0/c1", "t0", *c0)],
             "clusters": _fleet((4, 8), (4,)),
             "steps": [([_w(n, "t0/c0", 0, AV, 2, **hi) for n in (1, 2, 3)], []),
                       ([], []),
                       ([_w(n, "t0/c0", 2, AV, 2, **hi) for n in (4, 5, 6, 7)], []),
                       ([], []), ([], []),
                       ([_w(8, "t0/c0", 5, AV, 2, **hi), _w(9, "t0/c0", 5, AV, 2, **hi)]
                        + [_w(n, "t0/c0", 5, AV, 2) for n in (10, 11, 12)], []),
                       ([_w(13, "t0/c0", 6, AV, 2), _w(14, "t0/c0", 6, AV, 2)], []),
                       ([], [6]), ([], [0])]}
    log = _decisions(world, parking=True)
    assert _step(log, 8) == (["w13"], ["w10", "w11", "w12", "w14"])
    assert log == _decisions(world, parking=False)


def test_members_after_a_demoted_member_are_ranked_at_their_own_turn() -> None:
    """w2 and w3 (4 GPUs, t0/c1) are one group; at step 5 w2, starving, is within guarantee at
    the start but borrows once w11 and w12 are admitted, and w3 too. A full evaluation ranks
    w3 when its own turn comes (after w12 and w13 took more of t0/c1), behind w13; the group
    used to give w3 the rank found for w2 earlier, ahead of w13."""
    c = (4, 16), (0, 0)
    hi = {"priority": 10000, "can_preempt": True, "preemptible": False}
    world = {"queues": [_q("t0", None, (8, 16), (0, 0)), _q("t0/c0", "t0", *c),
                        _q("t0/c1", "t0", *c)],
             "clusters": _fleet((4, 4, 4), (4,)),
             "steps": [([], []), ([_w(2, "t0/c1", 1, A, 4)], []), ([], []),
                       ([_w(3, "t0/c1", 3, A, 4)], []),
                       ([_w(11, "t0/c1", 4, A, 2, **hi)], []),
                       ([_w(12, "t0/c1", 5, A, 2, **hi), _w(13, "t0/c1", 5, A, 1, 1000)], [])]}
    log = _decisions(world, parking=True)
    assert _step(log, 5) == (["w11", "w12", "w2", "w13"], [])
    assert log == _decisions(world, parking=False)


def test_preemptor_failing_behind_a_hold_is_tried_when_it_goes_first() -> None:
    """w7 (4 GPUs, can preempt) fails at step 7 behind starving w5's hold on the only a100
    node (its reason, QUOTA_MAX, is why it does not fit without victims). At step 8 it goes
    before w5 and preempts w1..w4; it used to stay parked, holding."""
    hi = {"priority": 10000, "can_preempt": True}
    world = {"queues": [_q("t0", None, (5, 5), (0, 0))], "clusters": _fleet((4,), (4,)),
             "steps": [([_w(n, "t0", 0, A, 1) for n in (1, 2, 3)], []),
                       ([_w(4, "t0", 1, A, 1), _w(5, "t0", 1, A, 1), _w(6, "t0", 1, A, 4, **hi),
                         _w(7, "t0", 1, A, 4, **hi)], []),
                       ([], []), ([], []), ([], []), ([], []), ([], []), ([], [0])]}
    log = _decisions(world, parking=True)
    assert _step(log, 8) == ([], ["w1", "w2", "w3", "w4"])
    assert _step(log, 9) == (["w7"], [])
    assert log == _decisions(world, parking=False)


def test_resubmitted_victim_does_not_pass_a_claimant_of_its_group() -> None:
    """Found by hypothesis (random seed, 3,000 examples; also at a9adece): at step 4 w4 (t0,
    2 x 4 GPUs) reclaims w1 on v100 while w5 (t1/c0) reclaims w3, identical to w4 and just
    admitted on a100 (grace 0). At step 5 both victims are back: w4's victims are gone, so a
    full evaluation tries w4 first (it takes v100). The parked engine moves w4 to the front of
    its group when w1 ends; w3, resubmitted right after, was inserted by submit time and
    name ahead of it and took v100 instead. `_join` now inserts behind the group's leading
    claimants."""
    queues = [_q("t0", None, (0, 40), (8, 8)), _q("t1", None, (2, 2), (0, 8)),
              _q("t1/c0", "t1", (1, 2), (0, 8)), _q("t1/c1", "t1", (1, 2), (0, 8))]

    def big(n: int, step: int) -> WorkloadSpec:
        return WorkloadSpec(f"w{n}", "t0", (PodSetSpec(2, AV, 4, 4, 16),),
                            submitted_at=float(step), priority=100, termination_grace_s=0)

    world = {"queues": queues, "clusters": _fleet((4, 4, 8), (8,)),
             "steps": [([_w(1, "t1/c0", 0, V, 1)], []), ([], []), ([], []), ([big(2, 3)], []),
                       ([big(3, 4), big(4, 4), _w(5, "t1/c0", 4, A, 1)], [])]}
    log = _decisions(world, parking=False)
    assert _step(log, 5) == (["w4", "w5"], [])
    assert _decisions(world, parking=True) == log
