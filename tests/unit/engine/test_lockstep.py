"""The kept engine in lockstep with one rebuilt from its snapshot, every cycle.

The scenario runner keeps one engine across cycles; the workers rebuild theirs from the
database before every cycle. `run_scenario(rebuild=True)` compares the two schedules, which
can agree while their states differ (a parked group remembering what a fresh evaluation would
not find). Here, before each cycle of a kept-engine replay, an engine rebuilt from the kept
one's snapshot (`export.snapshot_of`) runs the same cycle, and the two must decide the same
(admissions, preemptions, releases): a stale state shows up at the first cycle it matters,
not only if it changes the schedule. The replay's start forecasts read that snapshot, so a
stale state there is also a wrong forecast (docs/engine.md §13).

The streams are Philly-like (bench.engine.philly_scenario: tenants as leaves with elastic
quotas) and generated, heavy-tailed run times on a fleet sized to the mean demand, so that
queues borrow, reclaim and starve. Each seed below diverged before a fix.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from bench.engine import philly_scenario
from scheduling.engine import Engine
from scheduling.engine.export import snapshot_of
from scheduling.engine.types import CycleResult
from scheduling.replay import load_scenario
from scheduling.replay.runner import Runner
from tests.scenarios.test_scenarios import VALID


def _decided(res: CycleResult) -> tuple[Any, ...]:
    return (sorted((a.workload, a.cluster, a.flavor, tuple(a.nodes), a.borrowed)
                   for a in res.admitted),
            sorted((p.workload, p.by, str(p.kind)) for p in res.preempted),
            sorted(r.workload for r in res.released))


class Lockstep(Runner):
    """A kept-engine replay that records each cycle where an engine rebuilt from the kept
    one's snapshot decides otherwise: (time, kept's decisions, rebuilt's decisions)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.diverged: list[tuple[float, Any, Any]] = []

    def _cycle(self, t: float) -> None:
        rebuilt = _decided(Engine.from_snapshot(snapshot_of(self.eng, t)).cycle(t))
        eng = self.eng
        cycle = eng.cycle
        seen: list[CycleResult] = []

        def kept(now: float) -> CycleResult:
            res = cycle(now)
            seen.append(res)
            return res

        eng.cycle = kept  # type: ignore[method-assign]
        try:
            super()._cycle(t)
        finally:
            del eng.cycle
        mine = _decided(seen[0])
        if mine != rebuilt:
            self.diverged.append((t, mine, rebuilt))


def philly_like(n: int, seed: int, tenants: int = 6) -> list[tuple[float, float, int, str]]:
    """n jobs (submit, run time, GPUs, tenant): Poisson arrivals two minutes apart, Pareto
    run times (shape 0.9, from 5 minutes, at most 5 days), 1-16 GPUs."""
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    for _ in range(n):
        t += rng.expovariate(1 / 120)
        run = min(rng.paretovariate(0.9) * 300, 5 * 86_400)
        gpus = rng.choice([1, 1, 1, 1, 2, 4, 8, 8, 16])
        jobs.append((t, run, gpus, f"t{rng.randrange(tenants)}"))
    return jobs


def _first_divergence(diverged: list[tuple[float, Any, Any]]) -> str:
    t, mine, rebuilt = diverged[0]
    return (f"{len(diverged)} cycle(s) differ; first at t={t}: kept {mine}, "
            f"rebuilt {rebuilt}")


@pytest.mark.parametrize(("n", "seed", "until"), [
    # Before the fixes 1, 2 and 3 cycles differed: a parked group that a reclaim's cooldown
    # kept from holding when it last failed, still not holding once the cooldown had ended;
    # a cooldown named in a reason only when nothing else blocked the workload, so that it
    # held once the fleet filled up and not while it had room; a parked starving group
    # holding after a reclaim earlier in the cycle began its queue's cooldown. Then 3 (seed
    # 8): a workload within its guarantee but for the holds' phantom usage, parked on the
    # short path without being held back by the holders, so not tried when they changed.
    (1500, 2, None), (1500, 3, None), (1500, 5, None), (1500, 8, None),
    # Then 3 (seed 1): a preemption begun in a cycle (its victim in grace, no victim for
    # others any more) did not wake the parked preemptors it concerned, where a fresh
    # evaluation found another victim set for them.
    (1500, 1, None),
    # Then 1 (seed 100, first 280,000 s): another preemptor's preemption in the same cycle did
    # not wake a group held back by holders that held again, nor the parked preemptors behind
    # it in the order, as an admission does.
    (3000, 100, 280_000.0),
    # Still differs there later (t = 284,700: two borrowers admitted in the other order). Not
    # found yet.
    pytest.param(3000, 100, None, marks=pytest.mark.xfail(strict=True, reason=(
        "a kept engine admits another borrower first at t = 284,700"))),
])
def test_kept_engine_decides_like_one_rebuilt_every_cycle(
        n: int, seed: int, until: float | None) -> None:
    data, _ = philly_scenario(philly_like(n, seed), elastic=True, fleet_factor=1.0)
    if until is not None:
        data["until"] = until
    runner = Lockstep(load_scenario(data))
    plain = Runner(load_scenario(data)).run()
    out = runner.run()
    assert not runner.diverged, _first_divergence(runner.diverged)
    # The check itself changes nothing: the same replay as without it.
    assert {k: w["admissions"] for k, w in out["workloads"].items()} == {
        k: w["admissions"] for k, w in plain["workloads"].items()}


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_scenario_files_in_lockstep(path: Any) -> None:
    runner = Lockstep(load_scenario(str(path)))
    runner.run()
    assert not runner.diverged, _first_divergence(runner.diverged)
