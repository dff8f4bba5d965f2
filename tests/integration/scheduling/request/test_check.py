"""The submission-time request check (scheduling/request/check.py): a request that can never
run is rejected with the engine's reasons."""

from __future__ import annotations

import pytest

from scheduling.models import EventType, WorkloadState
from scheduling.services import workload_submit
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db


def test_impossible_request_is_rejected_with_reasons(world):
    # 4 pods x 8 GPUs = 32 > vision's max 24: it can never fit.
    w = workload_submit(user=world.alice, data=request("too-big", count=4))
    assert w.state == WorkloadState.REJECTED
    assert w.finished_at is not None
    reasons = list(w.events.filter(type=EventType.REASON).values_list("code", "message"))
    assert reasons and reasons[0][0] == "QUOTA_MAX"
    assert "24" in reasons[0][1] and "32" in reasons[0][1]
    assert w.reason_code == "QUOTA_MAX"


def test_gpu_memory_insufficient_is_rejected(world):
    body = request("big-mem")
    body["pods"][0]["gpu_memory_gib"] = 120
    w = workload_submit(user=world.alice, data=body)
    assert w.state == WorkloadState.REJECTED
    assert w.reason_code == "GPU_MEMORY_INSUFFICIENT"
