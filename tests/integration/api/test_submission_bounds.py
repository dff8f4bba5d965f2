"""A submission's numbers are bounded and exact: out of range or finer than stored is a 400
naming the field and the bound, and nothing is saved (no wrap at 2^31 or 2^32, no 500)."""

from __future__ import annotations

import pytest

from scheduling.models import PriorityClass, Workload
from tests.integration.api.conftest import client_for


@pytest.fixture
def alice(org):
    for name, value, can in (("inference-high", 10000, True), ("training", 1000, False),
                             ("batch-low", 100, False)):
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value,
                                                                 "can_preempt": can})
    return client_for(org["alice"])


def body(name: str, pod: dict | None = None, **extra):
    out = {"name": name, "queue": "rd/vision", "duration_hint_s": 3600,
           "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 1, "cpu": "4.5",
                     "memory_gib": 16, **(pod or {})}]}
    out.update(extra)
    return out


@pytest.mark.parametrize(("extra", "pod", "field", "says"), [
    ({"duration_hint_s": 2**32 + 1}, None, "duration_hint_s", "must be at most 31622400"),
    ({"duration_hint_s": 2**31}, None, "duration_hint_s", "must be at most 31622400"),
    ({"termination_grace_s": 2**32}, None, "termination_grace_s", "must be at most 3600"),
    ({}, {"gpu_memory_gib": 2**32 + 32}, "pods[0].gpu_memory_gib", "must be at most 1024"),
    ({}, {"count": 2**31}, "pods[0].count", "must be at most 10000"),
    ({}, {"gpus": 2**32 + 1}, "pods[0].gpus", "must be at most 64"),
    ({}, {"cpu": "1e9"}, "pods[0].cpu", "must be at most 4096"),
    ({}, {"memory_gib": 10**12}, "pods[0].memory_gib", "must be at most 65536"),
    ({}, {"cpu": "0.0001"}, "pods[0].cpu", "more than 3 decimal places"),
    ({}, {"cpu": True}, "pods[0].cpu", "is not a number"),
    ({}, {"memory_gib": [1]}, "pods[0].memory_gib", "is not a number"),
])
def test_out_of_range_numbers_are_400s_naming_the_field(alice, extra, pod, field, says):
    response = alice.post("/api/v1/workloads", body("big", pod, **extra), format="json")
    assert response.status_code == 400, response.content
    assert any(says in m for m in response.json()[field]), response.json()
    assert not Workload.objects.filter(name="big").exists()


def test_numbers_at_the_bounds_are_accepted_and_stored_exactly(alice):
    response = alice.post("/api/v1/workloads", body(
        "edge", {"gpu_memory_gib": 1024, "cpu": "4096", "memory_gib": "0.125"},
        duration_hint_s=366 * 86400, termination_grace_s=3600), format="json")
    assert response.status_code == 201, response.content
    w = Workload.objects.get(name="edge")
    assert w.duration_hint_s == 366 * 86400 and w.termination_grace_s == 3600
    ps = w.pod_sets.get()
    assert (ps.gpu_memory_gib, str(ps.cpu), str(ps.memory_gib)) == (1024, "4096.000", "0.125")
