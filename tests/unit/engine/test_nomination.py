"""Nominations (§5): what a preemption frees goes to the workload it was made for, in the live
engine and in one rebuilt from a snapshot every cycle (as the workers do)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine import Engine, ReasonCode, schedule
from scheduling.engine.export import snapshot_of

from .builders import cluster, engine, q, run, wl

RC = ReasonCode
SERVE = {"priority": 10000, "priority_class": "inference-high", "can_preempt": True}


def _two_preemptors() -> Engine:
    """3 nodes x 8; r (min 0) borrows all three with r1-r3. p (a, 7 GPUs) reclaims r3 at 10
    (grace until 40); q (b, 8 GPUs, higher priority) reclaims r2 at 12 (until 42)."""
    eng = engine([q("a", 8, 24), q("b", 8, 24), q("r", 0, 24)], [cluster(nodes=3)])
    run(eng, 0, *(wl(f"r{i}", "r", 8, t=i) for i in (1, 2, 3)))
    assert [p.workload for p in run(eng, 10, wl("p", "a", 7, t=10)).preempted] == ["r3"]
    assert [p.workload for p in run(eng, 12, wl("q", "b", 8, t=12, **SERVE)).preempted] \
        == ["r2"]
    return eng


def _grace_end(eng: Engine, name: str, now: float) -> None:
    """A victim's grace is over: ended and back in the queue (as the runner and workers do)."""
    a = eng.end(name, now)
    assert a is not None
    eng.submit(a.spec)


def _free_gpus(eng: Engine, node: str) -> int:
    cluster_name, flavor, i = eng.fleet.node_loc[node]
    return eng.fleet.by_name[cluster_name].pools[flavor].fg[i]


def _half_node_victims() -> Engine:
    """3 nodes x 8: b3 (b, min 0: borrowing) and x1 (x, within min) on a node each, b1 (grace
    30) and b2 (grace 90) sharing the third. p (a, 8 GPUs) reclaims b1 and b2 at 10."""
    eng = engine([q("a", 8, 24), q("b", 0, 24), q("x", 8, 24)], [cluster(nodes=3)])
    run(eng, 0, wl("b3", "b", 8), wl("x1", "x", 8, t=0.5))
    run(eng, 1, wl("b1", "b", 4, t=1, termination_grace_s=30),
        wl("b2", "b", 4, t=2, termination_grace_s=90))
    res = run(eng, 10, wl("p", "a", 8, t=10))
    assert {p.workload: p.grace_until for p in res.preempted} == {"b1": 40, "b2": 100}
    return eng


def test_a_preemption_nominates_the_preemptor_for_its_victims() -> None:
    eng = engine([q("a", 8, 24), q("r", 0, 24)], [cluster(nodes=2)])
    run(eng, 0, wl("r1", "r", 8), wl("r2", "r", 8, t=1))
    res = run(eng, 10, wl("p", "a", 7, t=10))
    nom = res.nominations["p"]
    assert nom is not None and nom.flavor == "a100-80g" and nom.at == 10
    assert [(v.name, v.queue, v.cluster, v.nodes, v.pods) for v in nom.victims] == [
        ("r2", "r", "c", ("c-a100-80g-1",), ((8, 8.0, 64.0),))]
    assert eng.nominations["p"] == nom


def test_rebuilt_engine_gives_the_freed_node_to_the_preemptor() -> None:
    """The workers' cycle: r3's grace ends; q (still waiting for r2, higher priority) is tried
    first in the order and would take r3's node, so p would reclaim again (r1). The snapshot
    carries p's nomination: p goes first and gets the node it preempted for."""
    eng = _two_preemptors()
    r3_node = eng.admitted["r3"].node_names
    _grace_end(eng, "r3", 40)
    snap = snapshot_of(eng, 40)
    assert set(snap.nominations) == {"p", "q"}
    res = schedule(snap)
    assert [(a.workload, a.nodes) for a in res.admitted] == [("p", r3_node)]
    assert res.preempted == []
    assert res.nominations == {"p": None}  # admitted: its nomination has done its work
    assert res.reasons["q"].code == RC.WAITING_FOR_PREEMPTION
    # What the snapshot used to give: p ordinary, q takes the node, p reclaims r1 as well.
    forgot = schedule(replace(snap, nominations={}))
    assert [(a.workload, a.nodes) for a in forgot.admitted] == [("q", r3_node)]
    assert [(p.workload, p.by) for p in forgot.preempted] == [("r1", "p")]
    # The live engine decides as the rebuilt one.
    live = eng.cycle(40)
    assert [(a.workload, a.nodes) for a in live.admitted] == [("p", r3_node)]
    assert live.preempted == []


@pytest.mark.parametrize("rebuild", [False, True], ids=["live", "rebuilt"])
def test_a_victim_ending_early_holds_its_capacity_for_the_preemptor(rebuild: bool) -> None:
    """p (a, 8) needs node0, where b1 (grace 30) and b2 (grace 90) run. b1 ends at 40: its 4
    GPUs stay held for p, so y (x, a borrower) does not take them; at 100 b2 ends and p is
    admitted on node0. Freed at 40, y would sit there and p would reclaim again at 100."""
    eng = _half_node_victims()
    shared = eng.admitted["b1"].node_names

    def cycle(now: float, *new):  # type: ignore[no-untyped-def]
        nonlocal eng
        for w in new:
            eng.submit(w)
        if rebuild:
            eng = Engine.from_snapshot(snapshot_of(eng, now))
        return run(eng, now)

    assert cycle(20, wl("y", "x", 4, t=20)).admitted == []
    _grace_end(eng, "b1", 40)
    res = cycle(40)
    assert res.admitted == [] and res.preempted == []  # y does not get b1's 4 GPUs
    assert _free_gpus(eng, shared[0]) == 0  # b1's held for p, b2's in its grace
    assert eng.waiting == {"p": {"b2"}}
    _grace_end(eng, "b2", 100)
    res = cycle(100)
    assert [(a.workload, a.nodes) for a in res.admitted] == [("p", shared)]
    assert res.preempted == []
    assert "b3" in eng.admitted and "x1" in eng.admitted and "y" in eng.pending


def test_nomination_ends_when_the_preemptor_is_admitted_elsewhere() -> None:
    """p waits for b2 while b1's capacity is held for it; x1 finishes and p fits there: p is
    admitted on x1's node, its nomination ends and b1's capacity is freed after the cycle."""
    eng = _half_node_victims()
    shared = eng.admitted["b1"].node_names[0]
    x1_node = eng.admitted["x1"].node_names
    _grace_end(eng, "b1", 40)
    eng.end("x1", 50)
    res = run(eng, 50)
    assert [(a.workload, a.nodes) for a in res.admitted] == [("p", x1_node)]
    assert res.nominations == {"p": None}
    assert "p" not in eng.nominations and "p" not in eng.held
    assert _free_gpus(eng, shared) == 4  # b1's half is free again; b2 is still in its grace
    _grace_end(eng, "b2", 100)  # no preemptor waits for it any more: freed at once
    assert _free_gpus(eng, shared) == 8
    assert eng.claims == set()


def test_nomination_ends_when_the_preemptor_leaves() -> None:
    eng = _half_node_victims()
    shared = eng.admitted["b1"].node_names
    _grace_end(eng, "b1", 40)
    assert _free_gpus(eng, shared[0]) == 0
    eng.remove_pending("p")  # cancelled
    assert _free_gpus(eng, shared[0]) == 4 and eng.nominations == {} and eng.held == {}
    res = run(eng, 41, wl("y", "x", 4, t=41))
    assert [(a.workload, a.nodes) for a in res.admitted] == [("y", shared)]


def test_nomination_lapses_after_its_first_turn_and_it_may_preempt_anew() -> None:
    """r3's node goes down while p waits for it: when r3 has ended p goes first, does not fit,
    its nomination lapses, and in the same turn it reclaims again (a new nomination)."""
    eng = _two_preemptors()
    node = eng.admitted["r3"].node_names[0]
    eng.set_node_ready(node, False)
    _grace_end(eng, "r3", 40)
    res = run(eng, 40)
    assert [p.workload for p in res.preempted] == ["r1"]
    nom = res.nominations["p"]
    assert nom is not None and [v.name for v in nom.victims] == ["r1"] and nom.at == 40


def test_a_preemptor_waits_for_its_victims_after_a_rebuild() -> None:
    """A snapshot without `waiting` (the victims' rows say who preempted them; here only the
    nomination does): p still waits for r3 and chooses no new victim."""
    eng = _two_preemptors()
    snap = replace(snapshot_of(eng, 20), waiting={})
    res = schedule(snap)
    assert res.preempted == [] and res.admitted == []
    assert res.reasons["p"].code == RC.WAITING_FOR_PREEMPTION
    assert "r3" in res.reasons["p"].message


def test_snapshot_round_trip_keeps_held_capacity() -> None:
    eng = _half_node_victims()
    _grace_end(eng, "b1", 40)
    snap = snapshot_of(eng, 40)
    again = Engine.from_snapshot(snap)
    assert snapshot_of(again, 40) == snap
    assert again.waiting == {"p": {"b2"}}
    assert [a.name for a in again.held["p"]] == ["b1"]
    assert _free_gpus(again, again.held["p"][0].node_names[0]) == 0
    assert again.tree.u == eng.tree.u


def test_a_preemptor_waits_while_its_ended_victims_pods_are_not_confirmed_gone() -> None:
    """Workers: r3's grace ended, but the cluster has not confirmed its pods gone, so its node
    is still taken (`held`, `unreleased`). p, nominated for it, neither reclaims again (r1 is
    a candidate) nor loses its nomination; once the release is confirmed it gets the node."""
    from scheduling.engine import HeldCapacity

    eng = _two_preemptors()
    r3_node = eng.admitted["r3"].node_names
    _grace_end(eng, "r3", 40)
    snap = snapshot_of(eng, 40)
    unconfirmed = replace(snap, held=(HeldCapacity("c", r3_node[0], 8, 8.0, 64.0),),
                          unreleased=frozenset({"r3"}))
    res = schedule(unconfirmed)
    assert res.admitted == [] and res.preempted == []
    assert "p" not in res.nominations  # kept
    assert res.reasons["p"].code == RC.WAITING_FOR_PREEMPTION
    # Without the names, the first turn after the grace finds the node taken and p reclaims
    # anew: the cascade this prevents.
    blind = schedule(replace(unconfirmed, unreleased=frozenset()))
    assert [p.workload for p in blind.preempted] == ["r1"]
    res = schedule(snap)  # confirmed: nothing held any more
    assert [(a.workload, a.nodes) for a in res.admitted] == [("p", r3_node)]
