"""One admission cycle: pods-ready timeouts release with a backoff."""

from __future__ import annotations

from scheduling.engine import ReasonCode

from .builders import cluster, engine, q, wl

RC = ReasonCode


def test_pods_ready_timeout_releases_with_backoff() -> None:
    eng = engine([q("a", 8, 8)], [cluster(nodes=1)], pods_ready_timeout_s=300)
    eng.submit(wl("w", "a", 8))
    eng.cycle(0)  # admitted, never marked running
    res = eng.cycle(300)
    assert [r.workload for r in res.released] == ["w"]
    rel = res.released[0]
    assert rel.reason.code == RC.PODS_READY_TIMEOUT and rel.not_before == 360
    assert eng.cycle(359).admitted == []
    assert [a.workload for a in eng.cycle(360).admitted] == ["w"]
    res = eng.cycle(660)
    assert res.released[0].not_before == 660 + 120 and res.released[0].backoff_count == 2
