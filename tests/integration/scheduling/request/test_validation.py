"""Validation of a submission (scheduling/request/validation.py): a malformed one names the
field and saves nothing."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Workload
from scheduling.services import workload_submit
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("change", "field", "text"),
    [
        ({"name": "Bad_Name"}, "name", "not DNS-safe"),
        ({"queue": "rd"}, "queue", "not a leaf"),
        ({"queue": "rd/nlp"}, "queue", "none of your teams may use queue rd/nlp"),
        ({"queue": "nope"}, "queue", "unknown queue 'nope'"),
        ({"priority_class": "urgent"}, "priority_class", "unknown priority class 'urgent'"),
        ({"pods": [{"count": 0, "flavors": ["a100-80g"], "gpus": 8}]}, "pods[0].count",
         "0 < 1"),
        ({"pods": [{"count": 1, "flavors": ["tpu-v5"], "gpus": 8}]}, "pods[0].flavors",
         "unknown flavor(s) tpu-v5"),
        ({"pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 0}]}, "pods[0]",
         "asks for nothing"),
        ({"pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 1, "cpu": -2}]},
         "pods[0].cpu", "-2 < 0"),
        ({"termination_grace_s": 7200}, "termination_grace_s", "7200 > 3600"),
        ({"topology": {"same": "zone"}}, "topology", "only"),
    ],
)
def test_malformed_submission_names_the_field_and_saves_nothing(world, change, field, text):
    with pytest.raises(ValidationError) as info:
        workload_submit(user=world.alice, data={**request("w"), **change})
    messages = info.value.message_dict
    assert field in messages, messages
    assert any(text in m for m in messages[field]), messages
    assert Workload.objects.count() == 0
