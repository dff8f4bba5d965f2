"""Starvation holds (§4.3): a starving workload keeps its flavor from later workloads."""

from __future__ import annotations

from scheduling.engine import ReasonCode

from .builders import cluster, engine, q, run, wl

RC = ReasonCode


def test_starving_workload_holds_its_flavor() -> None:
    eng = engine([q("a", 16, 16), q("b", 0, 16)], [cluster(nodes=1)], starvation_s=100)
    run(eng, 0, wl("small", "a", 4, t=0))
    res = run(eng, 200, wl("big", "a", 8, t=0), wl("other", "b", 4, t=150))
    # big waited 200 s > 100: it holds a100; other would fit (4 free) but may not take it.
    assert res.admitted == []
    assert res.reasons["other"].code == RC.NO_CAPACITY
    assert "starving workload big" in res.reasons["other"].message
