"""The scenario loader and runner (SCENARIO-FORMAT.md) on small hand-computed scenarios."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduling.replay import ScenarioError, load_scenario, run_scenario

BASE: dict[str, Any] = {
    "name": "unit",
    "until": 100,
    "flavors": [{"name": "a100-80g", "gpu_memory_gib": 80}],
    "clusters": [{"name": "c", "nodes": [{"count": 2, "flavor": "a100-80g", "gpus": 8,
                                          "cpu": 96, "memory_gib": 1024}]}],
    "queues": [{"name": "a", "quota": {"a100-80g": {"gpu": {"min": 8, "max": 16}}}},
               {"name": "b", "quota": {"a100-80g": {"gpu": {"min": 8, "max": 16}}}}],
    "workloads": [],
}


def scenario(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc.update(changes)
    return doc


def job(name: str, queue: str, at: float, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return {"name": name, "queue": queue, "submit_at": at,
            "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": gpus}], **kw}


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


def test_reclaim_grace_requeue_and_progress() -> None:
    out = run_scenario(load_scenario(scenario(until=2000, workloads=[
        job("a1", "a", 0, duration_s=500), job("a2", "a", 5, duration_s=1000),
        job("b1", "b", 100, duration_s=600)])))
    a2 = out["workloads"]["a2"]
    assert a2["preemptions"] == [{"at": 100, "by": "b1", "kind": "reclaim"}]
    assert [a["at"] for a in a2["admissions"]] == [5, 500]
    assert a2["finished_at"] == 500 + 1000 - 95
    assert out["workloads"]["b1"]["admissions"][0]["at"] == 130
    codes = [r["code"] for r in out["workloads"]["b1"]["reasons"]]
    assert codes == ["WAITING_FOR_PREEMPTION"]


def test_rejected_at_submission_and_cancel() -> None:
    out = run_scenario(load_scenario(scenario(workloads=[
        job("huge", "a", 0, gpus=16), job("c", "a", 0, cancel_at=20)])))
    assert out["workloads"]["huge"]["state"] == "rejected"
    assert out["workloads"]["huge"]["reasons"][0]["code"] == "NO_CAPACITY"
    assert out["workloads"]["c"]["state"] == "cancelled"


def test_invalid_scenario_lists_every_problem() -> None:
    doc = scenario(workloads=[job("w", "nope", -1), job("w", "a", 0, colour="red")],
                   extra=1, **{"x-note": "ignored"})
    doc["queues"][0]["quota"]["a100-80g"]["gpu"]["lendable"] = 12
    with pytest.raises(ScenarioError) as err:
        load_scenario(doc)
    problems = err.value.problems
    assert "scenario: unknown key 'extra'" in problems
    assert "workload w: queue 'nope' is not a leaf queue of the tree" in problems
    assert "workload w: submit_at -1 < 0" in problems
    assert "workload w: unknown key 'colour'" in problems
    assert "workload w: name used twice" in problems
    assert "a: a100-80g/gpu: lendable 12 > min 8" in problems
    assert len(problems) == 6


def test_missing_fields_and_files() -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario({"name": "x"})
    assert err.value.problems == [f"scenario: missing field {k!r}" for k in
                                  ("clusters", "flavors", "queues", "until", "workloads")]
    with pytest.raises(ScenarioError) as err:
        load_scenario("/nonexistent/scenario.yaml")
    assert "cannot read" in err.value.problems[0]


def test_nodes_down_evicts_and_requeues() -> None:
    out = run_scenario(load_scenario(scenario(
        until=300, workloads=[job("w", "a", 0, duration_s=100)],
        events=[{"at": 50, "cluster": "c", "flavor": "a100-80g", "nodes_down": 2},
                {"at": 80, "cluster": "c", "flavor": "a100-80g", "nodes_down": 0}])))
    w = out["workloads"]["w"]
    assert [a["at"] for a in w["admissions"]] == [0, 80]
    assert w["finished_at"] == 80 + 50  # checkpointed 50 s of 100
    assert [r["code"] for r in w["reasons"]][:2] == ["NO_CAPACITY", "FLAVOR_UNAVAILABLE"]
