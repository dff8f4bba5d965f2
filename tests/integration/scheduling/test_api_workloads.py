"""The workloads API (scheduling/api_workloads.py): submit, detail, list and cancel, who sees
what; POST /api/v1/workloads on its fast path: the 201 body is what a GET reads back, the
detail's fields are the serializer's, and a submission costs a fixed number of queries."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling import extensions, selectors, services
from scheduling.api_workloads import WorkloadDetailSerializer, workload_detail_data
from scheduling.models import Admission, Cluster, Workload
from scheduling.services import workload_submit
from tests.integration.scheduling.conftest import body
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def same(created: dict, read: dict) -> bool:
    """Equal (no forecast has run between the two: the start is not estimated in either)."""
    return created == read


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
    assert detail["queue_position"] == {
        "in_queue": 2, "ahead_gpus": 8, "estimated_start": None, "estimated_start_range": None,
        "estimate_assumes": "", "estimate_computed_at": None}  # not forecast yet

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


def test_list_mine_is_the_callers_own(world):
    workload_submit(user=world.alice, data=request("alices"))
    workload_submit(user=world.bob, data=request("bobs"))
    lead = client_for(world.bob)  # a lead sees the team's workloads; `mine` only his own
    assert [w["name"] for w in lead.get("/api/v1/workloads").json()["results"]] == [
        "bobs", "alices"]
    assert [w["name"] for w in lead.get("/api/v1/workloads?mine=true").json()["results"]] == [
        "bobs"]
    assert len(lead.get("/api/v1/workloads?mine=false").json()["results"]) == 2
    page = APIClient()
    page.force_login(world.alice)  # the page's filter form has it too
    html = page.get("/workloads/?mine=true").content.decode()
    assert "alices" in html and "bobs" not in html


def test_list_page_size(world):
    for i in range(12):
        workload_submit(user=world.alice, data=request(f"p{i}"))
    api = client_for(world.alice)
    page = api.get("/api/v1/workloads?page_size=5&page=3").json()
    assert page["count"] == 12 and page["next"] is None
    assert [w["name"] for w in page["results"]] == ["p1", "p0"]
    # More than the most (1000) is given the most; what is no size, the default (50).
    for size in ("5000", "abc", "0", "-3"):
        assert len(api.get(f"/api/v1/workloads?page_size={size}").json()["results"]) == 12


def test_list_data_is_what_the_serializers_fields_make(world):
    """The list answers `workload_list_data` (the serializer returns it): the same JSON as
    DRF's fields of WorkloadListSerializer make of a workload."""
    from rest_framework import serializers
    from rest_framework.renderers import JSONRenderer

    from scheduling.api_workloads import WorkloadListSerializer, workload_list_data

    two = request("two", pods=[
        {"count": 2, "flavors": ["a100-80g"], "gpus": 4, "cpu": "7.25", "memory_gib": 64},
        {"count": 1, "flavors": ["a100-80g"], "gpus": 0, "cpu": 2, "gpu_memory_gib": 40}])
    workload_submit(user=world.alice, data=two)
    workload_submit(user=world.alice, data=request("huge", count=40))  # rejected: a reason
    services.workload_cancel(user=world.alice, workload=workload_submit(
        user=world.alice, data=request("ended")))
    listed = list(selectors.workload_list(user=world.alice))
    assert {w.state for w in listed} == {"pending", "rejected", "cancelled"}

    def as_json(data):
        return json.loads(JSONRenderer().render(data))

    for w in listed:
        per_field = serializers.Serializer.to_representation(WorkloadListSerializer(), w)
        assert as_json(workload_list_data(w)) == as_json(per_field)
    assert WorkloadListSerializer(listed, many=True).data == [workload_list_data(w)
                                                              for w in listed]


def test_list_query_budget(world, django_assert_max_num_queries):
    for i in range(15):
        workload_submit(user=world.alice, data=request(f"b{i}"))
    api = client_for(world.alice)
    with django_assert_max_num_queries(8):
        resp = api.get("/api/v1/workloads")
    assert resp.status_code == 200 and resp.json()["count"] == 15


def test_created_body_is_what_a_get_reads_back(alice, org):
    first = alice.post("/api/v1/workloads", body("first", gpus=4), format="json")
    assert first.status_code == 201, first.content
    second = alice.post("/api/v1/workloads", body("second", gpus=2), format="json")
    assert second.status_code == 201, second.content
    created = second.json()
    assert same(created, alice.get(f"/api/v1/workloads/{created['id']}").json())
    assert created["state"] == "pending" and created["team"] == "vision"
    assert created["queue_position"]["in_queue"] == 2
    assert created["queue_position"]["ahead_gpus"] == 4
    assert created["pod_sets"][0]["cpu"] == 4.5 and created["gpus"] == 2
    assert [e["type"] for e in created["events"]] == ["submitted"]
    assert created["events"][0]["actor"] == "alice"
    assert created["pods"] == [{"name": f"allot-w{created['id']}-0-0", "pod_set": 0,
                                "node": None, "phase": ""}]


def test_rejected_and_held_bodies_are_what_a_get_reads_back(alice, org):
    # rd's max is 32 A100 GPUs: 5 x 8 = 40 can never fit.
    rejected = alice.post("/api/v1/workloads", body("huge", gpus=8, count=5), format="json")
    assert rejected.status_code == 201
    out = rejected.json()
    assert out["state"] == "rejected" and out["reasons"] and out["queue_position"] is None
    assert same(out, alice.get(f"/api/v1/workloads/{out['id']}").json())

    # Above the approval threshold of hours: held with the reason and a policy event.
    held = alice.post("/api/v1/workloads", body("long", duration_hint_s=100 * 3600),
                      format="json").json()
    assert held["reason"]["code"] == "NEEDS_APPROVAL"
    assert [e["type"] for e in held["events"]] == ["submitted", "policy"]
    assert same(held, alice.get(f"/api/v1/workloads/{held['id']}").json())


def test_policy_verdict_is_in_the_created_body(alice, org):
    def lower(ctx):
        return extensions.SubmissionVerdict(priority_class="batch-low",
                                            audit=["lowered by test policy"])

    extensions.register_submission_check(lower)
    try:
        out = alice.post("/api/v1/workloads", body("lowered"), format="json").json()
    finally:
        extensions.unregister_submission_check(lower)
    assert out["priority_class"] == "batch-low"
    assert [e["message"] for e in out["events"] if e["type"] == "policy"] == [
        "lowered by test policy", "priority class training -> batch-low (set by policy)"]
    assert same(out, alice.get(f"/api/v1/workloads/{out['id']}").json())


def test_detail_data_has_the_serializers_fields(org, classes):
    """What the detail answers (the serializer returns `workload_detail_data`) has exactly the
    fields the serializer declares for the schema, for a pending and an admitted workload."""
    w = services.workload_submit(user=org["alice"], data=body("adm", count=2), nudge=False)
    cluster = Cluster.objects.get(name="bj")
    now = timezone.now()
    Admission.objects.create(workload=w, cluster=cluster, flavor_id=cluster.nodes.first().flavor_id,
                             nodes=["bj-a100-0", "bj-a100-1"], gpus=2, cpu=Decimal(9),
                             memory_gib=Decimal(32), reserved_at=now,
                             running_at=now + timedelta(seconds=3))
    pending = services.workload_submit(user=org["alice"], data=body("p", gpus=2), nudge=False)
    declared = set(WorkloadDetailSerializer().fields)
    for pk in (w.pk, pending.pk):
        loaded = selectors.workload_get(user=org["alice"], pk=pk)
        assert set(workload_detail_data(loaded)) == declared
        with mock.patch("django.utils.timezone.now", return_value=now):
            assert WorkloadDetailSerializer(loaded).data == workload_detail_data(loaded)
    admitted = workload_detail_data(selectors.workload_get(user=org["alice"], pk=w.pk))
    assert admitted["admission"]["nodes"] == ["bj-a100-0", "bj-a100-1"]
    assert [p["node"] for p in admitted["pods"]] == ["bj-a100-0", "bj-a100-1"]


@pytest.mark.django_db(transaction=True)
def test_post_query_budget(alice, org):
    """A warm POST (committed data, as in production): one check of the change log for the
    whole request (the token, cached until a token or user changes; the queue lookup,
    classes, flavors, policies, budgets and the engine's impossibility check, cached until a
    table they come from changes), and one INSERT statement for the workload, its pod sets
    and its events that also reads the queue position; BEGIN and COMMIT around it."""
    alice.post("/api/v1/workloads", body("warm"), format="json")
    with CaptureQueriesContext(connection) as ctx:
        r = alice.post("/api/v1/workloads", body("counted"), format="json")
    assert r.status_code == 201, r.content
    assert r.json()["queue_position"]["in_queue"] == 2
    sqls = [q["sql"] for q in ctx.captured_queries]
    if connection.vendor != "postgresql":
        assert len(sqls) <= 12, "\n".join(s[:120] for s in sqls)
        return
    assert not any("portal_apitoken" in s for s in sqls), sqls
    assert sum("INSERT" in s for s in sqls) == 1, sqls
    assert sum("policies_changes_since" in s for s in sqls) == 1, sqls
    assert len(sqls) == 4, "\n".join(s[:120] for s in sqls)


def test_the_schema_lists_every_event_type(client, world):
    from scheduling.models import EventType

    client.force_login(world.alice)
    schema = client.get("/api/schema/?format=json").json()
    events = schema["components"]["schemas"]["WorkloadDetail"]["properties"]["events"]
    assert events["description"].endswith("type is one of " + ", ".join(EventType.values) + ".")
    assert {"resubmitted", "updated"} <= set(EventType.values)


def test_the_schema_declares_the_gangs_of_a_submission(client, world):
    client.force_login(world.alice)
    schema = client.get("/api/schema/?format=json").json()
    created = schema["paths"]["/api/v1/workloads"]["post"]["responses"]["201"]
    ref = created["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    props = schema["components"]["schemas"][ref]["properties"]
    assert "gangs" in props and "queue_position" in props
    assert "gangs" not in schema["components"]["schemas"][ref].get("required", [])
