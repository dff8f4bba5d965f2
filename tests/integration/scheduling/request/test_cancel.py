"""Cancellation (scheduling/request/cancel.py): by the owner, once, with its event."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import EventType, WorkloadEvent, WorkloadState
from scheduling.services import workload_cancel, workload_submit
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db


def test_cancel_pending_by_owner_and_refuse_second_cancel(world):
    w = workload_submit(user=world.alice, data=request("c1"))
    w = workload_cancel(user=world.alice, workload=w)
    assert w.state == WorkloadState.CANCELLED
    assert w.events.filter(type=EventType.CANCELLED, actor=world.alice).exists()
    with pytest.raises(ValidationError, match="already cancelled"):
        workload_cancel(user=world.alice, workload=w)


def test_events_are_never_missing_for_state_changes(world):
    w = workload_submit(user=world.alice, data=request("ev"))
    workload_cancel(user=world.alice, workload=w)
    assert list(WorkloadEvent.objects.filter(workload=w).values_list("type", flat=True)) == [
        "submitted", "cancelled"]
