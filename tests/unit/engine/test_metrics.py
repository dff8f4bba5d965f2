"""The replay's output and metrics (SCENARIO-FORMAT.md) on a small hand-computed scenario."""

from __future__ import annotations

import pytest

from scheduling.replay import load_scenario, run_scenario

from .replay_builders import job, scenario


def test_output_shape_and_metrics() -> None:
    out = run_scenario(load_scenario(scenario(workloads=[
        job("w1", "a", 0, duration_s=50), job("w2", "b", 10, duration_s=40)])))
    assert out["scenario"] == "unit"
    w1 = out["workloads"]["w1"]
    assert w1 == {"state": "finished", "admissions": [
        {"at": 0, "cluster": "c", "flavor": "a100-80g", "borrowed": False,
         "nodes": ["c-a100-80g-0"]}], "preemptions": [], "finished_at": 50, "reasons": []}
    assert out["workloads"]["w2"]["finished_at"] == 50
    m = out["metrics"]
    # Allocated 8*50 + 8*40 = 720 GPU-s of 16*100 = 1600.
    assert m["gpu_allocation_rate"] == pytest.approx(0.45)
    assert m["demand_bounded_allocation_rate"] == 1
    assert m["mean_wait_s"] == 0 and m["p95_wait_s"] == 0 and m["preemptions"] == 0
    # Each leaf: 400 and 320 GPU-s over min-share 8 -> 50, 40: (90^2) / (2 * (2500 + 1600)).
    assert m["jain_fairness"] == pytest.approx(8100 / 8200, abs=1e-6)
    assert m["min_guarantee_violation_s"] == 0
