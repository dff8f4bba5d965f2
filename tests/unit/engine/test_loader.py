"""The scenario loader (SCENARIO-FORMAT.md): every problem of an invalid scenario."""

from __future__ import annotations

import pytest

from scheduling.replay import ScenarioError, load_scenario

from .replay_builders import job, scenario


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
