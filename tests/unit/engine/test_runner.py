"""The scenario runner's events (SCENARIO-FORMAT.md) on small hand-computed scenarios."""

from __future__ import annotations

from scheduling.replay import load_scenario, run_scenario

from .replay_builders import job, scenario


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


def test_nodes_down_evicts_and_requeues() -> None:
    out = run_scenario(load_scenario(scenario(
        until=300, workloads=[job("w", "a", 0, duration_s=100)],
        events=[{"at": 50, "cluster": "c", "flavor": "a100-80g", "nodes_down": 2},
                {"at": 80, "cluster": "c", "flavor": "a100-80g", "nodes_down": 0}])))
    w = out["workloads"]["w"]
    assert [a["at"] for a in w["admissions"]] == [0, 80]
    assert w["finished_at"] == 80 + 50  # checkpointed 50 s of 100
    assert [r["code"] for r in w["reasons"]][:2] == ["NO_CAPACITY", "FLAVOR_UNAVAILABLE"]
