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
