"""Validation of a submission (scheduling/request/validation.py): a malformed one names the
field and saves nothing."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Workload
from scheduling.services import workload_submit
from tests.integration.scheduling.conftest import body
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
        ({"name": "resnet\n"}, "name", "not DNS-safe"),
        ({"labels": {"team\x00": "vision"}}, "labels",
         "label key 'team\\x00' contains a NUL character"),
        ({"labels": {"team": "vi\x00sion"}}, "labels", "contains a NUL character"),
        ({"labels": {"Example.com/team": "x"}}, "labels", "is not a DNS subdomain"),
        ({"labels": {"team": "a b"}}, "labels", "is not a Kubernetes label value"),
        ({"image": "registry.local/x\x00"}, "image", "no NUL"),
        ({"command": ["python", "\x00"]}, "command", "no NUL"),
    ],
)
def test_malformed_submission_names_the_field_and_saves_nothing(world, change, field, text):
    with pytest.raises(ValidationError) as info:
        workload_submit(user=world.alice, data={**request("w"), **change})
    messages = info.value.message_dict
    assert field in messages, messages
    assert any(text in m for m in messages[field]), messages
    assert Workload.objects.count() == 0


def _with(data: dict, pod: dict | None) -> dict:
    """`data` with its first pod set's fields replaced by `pod`'s."""
    data["pods"][0].update(pod or {})
    return data


# A submission's numbers are bounded and exact: out of range or finer than stored is a 400
# naming the field and the bound, and nothing is saved (no wrap at 2^31 or 2^32, no 500).
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
    response = alice.post("/api/v1/workloads", _with(body("big", **extra), pod), format="json")
    assert response.status_code == 400, response.content
    assert any(says in m for m in response.json()[field]), response.json()
    assert not Workload.objects.filter(name="big").exists()


def test_numbers_at_the_bounds_are_accepted_and_stored_exactly(alice):
    response = alice.post("/api/v1/workloads", _with(body(
        "edge", duration_hint_s=366 * 86400, termination_grace_s=3600),
        {"gpu_memory_gib": 1024, "cpu": "4096", "memory_gib": "0.125"}), format="json")
    assert response.status_code == 201, response.content
    w = Workload.objects.get(name="edge")
    assert w.duration_hint_s == 366 * 86400 and w.termination_grace_s == 3600
    ps = w.pod_sets.get()
    assert (ps.gpu_memory_gib, str(ps.cpu), str(ps.memory_gib)) == (1024, "4096.000", "0.125")


# GPUs per pod: whole cards, or a fraction of one card in steps of 0.001 (QUOTA-SEMANTICS §10).
@pytest.mark.parametrize(("gpus", "says"), [
    (0, "asks for nothing"),
    ("0", "asks for nothing"),
    (1.5, "more than one card is a whole number of cards"),
    ("2.25", "more than one card is a whole number of cards"),
    (0.0001, "a fraction of a card is in steps of 0.001"),
    ("0.2505", "a fraction of a card is in steps of 0.001"),
    (-0.25, "must not be negative"),
    (-1, "must not be negative"),
    ("quarter", "is not a number"),
    (True, "is not a number"),
])
def test_bad_gpu_fractions_are_400s_naming_the_field(alice, gpus, says):
    pod = {"gpus": gpus, "cpu": 0, "memory_gib": 0}
    response = alice.post("/api/v1/workloads", _with(body("frac"), pod), format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    field = "pods[0]" if says == "asks for nothing" else "pods[0].gpus"
    assert any(says in m for m in errors[field]), errors
    assert not Workload.objects.filter(name="frac").exists()


@pytest.mark.parametrize(("gpus", "stored", "shown"), [
    (0.25, "0.250", 0.25), ("0.125", "0.125", 0.125), (0.001, "0.001", 0.001),
    ("0.999", "0.999", 0.999), (2, "2.000", 2), ("4.0", "4.000", 4),
])
def test_gpu_fractions_are_stored_exactly_and_shown_as_people_read_them(alice, gpus, stored,
                                                                        shown):
    response = alice.post("/api/v1/workloads", _with(body("frac"), {"gpus": gpus}),
                          format="json")
    assert response.status_code == 201, response.content
    ps = Workload.objects.get(name="frac").pod_sets.get()
    assert str(ps.gpus) == stored
    data = response.json()
    assert data["pod_sets"][0]["gpus"] == shown and data["gpus"] == shown
