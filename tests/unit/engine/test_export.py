"""`export.snapshot_of`: an engine rebuilt from the snapshot of another before every cycle (as
the workers rebuild theirs from the database) decides what the live one decides (hypothesis:
the random trees, fleets and streams of test_parking, with graces of 0 to 3 s and finishes
that may hit victims in grace, so that a preemptor's victims often end at different times)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import Engine, FlavorSpec, Settings
from scheduling.engine.export import snapshot_of

from .test_parking import streams


@st.composite
def worlds(draw: Any) -> dict[str, Any]:
    world = draw(streams())
    graces = st.sampled_from([0, 1, 2, 3])
    steps = [([replace(w, termination_grace_s=draw(graces)) for w in batch], finish)
             for batch, finish in world["steps"]]
    return {**world, "steps": steps}


def _decisions(world: dict[str, Any], rebuild: bool) -> list[Any]:
    eng = Engine(queues=world["queues"], clusters=world["clusters"],
                 flavors=(FlavorSpec("a100-80g", 80), FlavorSpec("v100-32g", 32)),
                 settings=Settings(reclaim_cooldown_s=2, starvation_s=3))
    log: list[Any] = []
    steps = [*world["steps"], *([([], [])] * 4)]  # quiet: graces and cooldowns run out
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
            if a is not None:  # victims in grace too (finished early, cancelled)
                eng.end(name, now)
        for w in batch:
            if not eng.check(w):
                eng.submit(w)
        if rebuild:
            eng = Engine.from_snapshot(snapshot_of(eng, now))
        res = eng.cycle(now)
        for a in res.admitted:
            eng.mark_running(a.workload)
        log.append((step,
                    [(a.workload, a.cluster, a.flavor, a.nodes, a.borrowed) for a in res.admitted],
                    sorted((p.workload, p.by, str(p.kind)) for p in res.preempted),
                    sorted(res.nominations)))
    return log


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_an_engine_rebuilt_every_cycle_decides_like_the_live_one(world: dict[str, Any]) -> None:
    assert _decisions(world, rebuild=True) == _decisions(world, rebuild=False)


def test_a_claim_behind_one_that_had_its_turn_keeps_its_first_turn():
    """Two alike preemptors whose victims are gone are both owed the first turn (claims). In a
    full cycle the first fails and the second, alike, is not tried. The kept engine must then
    hold the same state as one rebuilt from its snapshot (as the workers rebuild it every
    cycle): the second still a claim, first in its group, so that when capacity frees it is
    the one admitted. Before, the first stayed at the group's head as an ordinary member and
    the claim behind it never had its turn: its nomination never ended, and a forecast rebuilt
    from the snapshot admitted it where the kept engine did not (the Philly replay, j60)."""
    from scheduling.engine import AdmittedWorkload, NominatedVictim, Nomination, Snapshot

    from .builders import A100, cluster, q, wl

    now = 1000.0
    r = AdmittedWorkload(wl("r", "a", 8, t=0), "c", A100, ("c-a100-80g-0",), False, 0.0,
                         running=True)
    gone = (NominatedVictim(name="v", queue="a", cluster="c", nodes=("c-a100-80g-0",),
                            pods=((8, 8.0, 64.0),)),)
    snap = Snapshot(now=now, queues=(q("a", 8, 8),), clusters=(cluster(nodes=1),),
                    flavors=(FlavorSpec(A100, 80),),
                    pending=(wl("c1", "a", 8, t=10), wl("c2", "a", 8, t=20)), admitted=(r,),
                    settings=Settings(),
                    nominations={"c1": Nomination(A100, 900.0, gone),
                                 "c2": Nomination(A100, 900.0, gone)})
    eng = Engine.from_snapshot(snap)
    assert eng.claims == {"c1", "c2"}
    assert not eng.cycle(now).admitted  # a is at its max: c1 fails, c2 fails the same way
    assert eng.claims == {"c2"} and set(eng.nominations) == {"c2"}
    assert [m.name for m in eng.pending["c2"].group.members] == ["c2", "c1"]
    eng.end("r", now + 60)
    rebuilt = Engine.from_snapshot(snapshot_of(eng, now + 60))
    kept = [a.workload for a in eng.cycle(now + 60).admitted]
    assert kept == [a.workload for a in rebuilt.cycle(now + 60).admitted] == ["c2"]
