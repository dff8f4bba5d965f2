"""Submission, validation, rejection, visibility and cancellation through the service and API."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from scheduling import extensions
from scheduling.models import EventType, Workload, WorkloadEvent, WorkloadState
from scheduling.services import workload_cancel, workload_submit
from scheduling.transitions import ALLOWED_TRANSITIONS
from tests.integration.scheduling.world import make_world, request

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    return make_world()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_submit_records_pending_with_submitted_event(world):
    w = workload_submit(user=world.alice, data=request("resnet-1"))
    assert w.state == WorkloadState.PENDING
    assert w.team.name == "vision"
    assert w.priority_class.name == "training"
    assert [(ps.count, ps.gpus, ps.flavors) for ps in w.pod_sets.all()] == [
        (1, 8, ["a100-80g"])]
    events = list(w.events.values_list("type", flat=True))
    assert events == [EventType.SUBMITTED]
    assert "8 GPUs in 1 pods" in w.events.get().message


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


def test_submission_check_denies_and_audits(world):
    def deny_big(ctx):
        gpus = sum(p["count"] * p["gpus"] for p in ctx.request["pods"])
        if gpus > 8:
            return extensions.SubmissionVerdict(
                deny=[("POLICY_DENIED", f"policy max-8: {gpus} GPUs > 8")])
        return extensions.SubmissionVerdict(audit=["policy max-8: allowed"])

    extensions.register_submission_check(deny_big)
    try:
        ok = workload_submit(user=world.alice, data=request("small"))
        denied = workload_submit(user=world.alice, data=request("big", count=2))
    finally:
        extensions.unregister_submission_check(deny_big)
    assert ok.state == WorkloadState.PENDING
    assert ok.events.filter(type=EventType.POLICY, message="policy max-8: allowed").exists()
    assert denied.state == WorkloadState.REJECTED
    assert denied.events.filter(type=EventType.REASON, code="POLICY_DENIED",
                                message="policy max-8: 16 GPUs > 8").exists()


def test_transitions_table_closes_terminal_states():
    for state in (WorkloadState.FINISHED, WorkloadState.CANCELLED, WorkloadState.REJECTED,
                  WorkloadState.FAILED):
        assert ALLOWED_TRANSITIONS[state] == frozenset()
    assert WorkloadState.RESERVED in ALLOWED_TRANSITIONS[WorkloadState.PENDING]
    assert WorkloadState.RUNNING not in ALLOWED_TRANSITIONS[WorkloadState.PENDING]


def test_cancel_pending_by_owner_and_refuse_second_cancel(world):
    w = workload_submit(user=world.alice, data=request("c1"))
    w = workload_cancel(user=world.alice, workload=w)
    assert w.state == WorkloadState.CANCELLED
    assert w.events.filter(type=EventType.CANCELLED, actor=world.alice).exists()
    with pytest.raises(ValidationError, match="already cancelled"):
        workload_cancel(user=world.alice, workload=w)


def test_api_submit_detail_list_and_cancel(world):
    api = client_for(world.alice)
    resp = api.post("/api/v1/workloads", request("api-1"), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["state"] == "pending" and body["queue"] == "rd/vision"
    assert body["team"] == "vision" and body["owner"] == "alice"
    assert body["queue_position"]["in_queue"] == 1
    assert body["queue_position"]["ahead_gpus"] == 0
    assert body["events"][0]["type"] == "submitted"
    assert len(body["pods"]) == 1 and body["pods"][0]["name"] == f"allot-w{body['id']}-0-0"

    second = api.post("/api/v1/workloads", request("api-2", gpus=4), format="json").json()
    detail = api.get(f"/api/v1/workloads/{second['id']}").json()
    assert detail["queue_position"] == {"in_queue": 2, "ahead_gpus": 8,
                                        "estimated_start": detail["queue_position"][
                                            "estimated_start"]}

    listing = api.get("/api/v1/workloads").json()
    assert [w["name"] for w in listing["results"]] == ["api-2", "api-1"]  # newest first
    assert api.get("/api/v1/workloads?state=running").json()["results"] == []
    assert len(api.get("/api/v1/workloads?queue=rd").json()["results"]) == 2

    resp = api.post(f"/api/v1/workloads/{body['id']}/cancel")
    assert resp.status_code == 200 and resp.json()["state"] == "cancelled"


def test_api_rejected_is_201_and_malformed_is_400(world):
    api = client_for(world.alice)
    resp = api.post("/api/v1/workloads", request("huge", count=4), format="json")
    assert resp.status_code == 201
    assert resp.json()["state"] == "rejected"
    assert resp.json()["reasons"][0]["code"] == "QUOTA_MAX"
    resp = api.post("/api/v1/workloads", request("Bad Name"), format="json")
    assert resp.status_code == 400
    assert "name" in resp.json()
    resp = api.post("/api/v1/workloads", {"name": "x"}, format="json")
    assert resp.status_code == 400 and "pods" in resp.json() and "queue" in resp.json()
    assert Workload.objects.filter(name__in=["Bad Name", "x"]).count() == 0


def test_other_teams_workloads_are_404_and_hidden(world):
    mine = workload_submit(user=world.alice, data=request("mine"))
    api = client_for(world.carol)
    assert api.get(f"/api/v1/workloads/{mine.pk}").status_code == 404
    assert api.post(f"/api/v1/workloads/{mine.pk}/cancel").status_code == 404
    assert api.get("/api/v1/workloads").json()["results"] == []
    # A lead of the team may cancel a member's workload; admins see everything.
    assert client_for(world.bob).post(f"/api/v1/workloads/{mine.pk}/cancel").status_code == 200
    assert client_for(world.admin).get(f"/api/v1/workloads/{mine.pk}").status_code == 200
    assert APIClient().get("/api/v1/workloads").status_code == 401


def test_list_query_budget(world, django_assert_max_num_queries):
    for i in range(15):
        workload_submit(user=world.alice, data=request(f"b{i}"))
    api = client_for(world.alice)
    with django_assert_max_num_queries(8):
        resp = api.get("/api/v1/workloads")
    assert resp.status_code == 200 and resp.json()["count"] == 15


def test_events_are_never_missing_for_state_changes(world):
    w = workload_submit(user=world.alice, data=request("ev"))
    workload_cancel(user=world.alice, workload=w)
    assert list(WorkloadEvent.objects.filter(workload=w).values_list("type", flat=True)) == [
        "submitted", "cancelled"]
