"""Data migrations of the scheduling app, run on rows the code before them wrote."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from scheduling.models import WorkloadEvent
from scheduling.services import workload_submit
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db


def test_0011_retypes_the_resubmission_and_update_events_written_as_submitted(world):
    migration = importlib.import_module(
        "scheduling.migrations.0011_event_types_resubmitted_updated")
    w = workload_submit(user=world.alice, data=request("old"))
    for code in ("RESUBMITTED", "UPDATED", "OTHER"):
        WorkloadEvent.objects.create(workload=w, at=w.submitted_at, type="submitted", code=code)
    migration.retype(apps, None)
    assert sorted(w.events.values_list("type", "code")) == [
        ("resubmitted", "RESUBMITTED"), ("submitted", ""), ("submitted", "OTHER"),
        ("updated", "UPDATED")]
    migration.untype(apps, None)
    assert set(w.events.values_list("type", flat=True)) == {"submitted"}
