"""The full-stack bench's mixed kinds: each manifest derives the scenario workload's pods."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bench.fullstack import MIXED_KINDS, as_manifest, manifest_of
from scheduling.kinds import kind_of

POD = {"count": 3, "flavors": ["cpu"], "gpus": 0, "cpu": 5, "memory_gib": 1}


@pytest.mark.parametrize("kind", [k for k in MIXED_KINDS if k])
def test_each_kind_derives_the_scenario_pods(kind: str) -> None:
    manifest = manifest_of(kind, "w-1", POD)
    k = kind_of(manifest)
    sets = k.derive(manifest)
    assert not k.serving  # the run ends when every workload has
    assert sum(s.count for s in sets) == 3
    assert {(s.cpu, s.memory_gib, s.gpus) for s in sets} == {(Decimal(5), Decimal(1), 0)}


@pytest.mark.parametrize("kind", [k for k in MIXED_KINDS if k])
def test_a_single_pod_stays_one_pod(kind: str) -> None:
    manifest = manifest_of(kind, "w-1", {**POD, "count": 1})
    assert sum(s.count for s in kind_of(manifest).derive(manifest)) == 1


def test_as_manifest_moves_pods_into_the_manifest() -> None:
    body = {"name": "w-1", "queue": "q", "pods": [POD]}
    out = as_manifest(dict(body), "Job")
    assert "pods" not in out
    assert out["flavors"] == ["cpu"]
    assert out["manifest"]["spec"]["parallelism"] == 3
    assert as_manifest(dict(body), None) == body
