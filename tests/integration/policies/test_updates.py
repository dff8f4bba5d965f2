"""The update path (scheduling.request.updates): resubmit an ended workload, PATCH a pending one,
the workload page's Resubmit button; grandfathering under a newly tightened rule, growing judged as
new; bad input, foreign and unmanageable ids."""

import pytest
from django.test import Client

from policies.models import PolicyViolation
from policies.services import policy_create
from quotas.models import Team, TeamMembership
from scheduling.models import PodSet, Workload
from tests.factories import QueueFactory, UserFactory, workloads_set_state

# A rule tightened after the workloads below were accepted (they ask for 16 GPUs).
TIGHT = {"name": "at-most-8", "kind": "validate", "mode": "enforce", "rule": "request.gpus <= 8",
         "message": '"at most 8 GPUs per workload, asked " + string(request.gpus)'}


def submit(api, gpus=16, name="sweep", queue="rd/team-a"):
    response = api.post("/api/v1/workloads", {
        "name": name, "queue": queue, "image": "train:1", "labels": {"kind": "train"},
        "pods": [{"count": gpus // 8, "flavors": ["a100-80g"], "gpus": 8}]}, format="json")
    assert response.status_code == 201, response.json()
    return Workload.objects.get(pk=response.json()["id"])


def ended(api, state="finished", **kw):
    workload = submit(api, **kw)
    workloads_set_state(Workload.objects.filter(pk=workload.pk), state)
    return workload


def resubmit(api, workload, body=None):
    return api.post(f"/api/v1/workloads/{workload.pk}/resubmit", body or {}, format="json")


def violations():
    return list(PolicyViolation.objects.order_by("id").values_list("outcome", "message"))


# --- resubmit --------------------------------------------------------------------------------

def test_resubmit_unchanged_is_grandfathered_under_a_tightened_rule(org, user_api):
    old = ended(user_api)
    policy_create(user=org.admin, data=TIGHT)
    response = resubmit(user_api, old)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["id"] != old.pk and body["state"] == "pending" and body["gpus"] == 16
    assert body["image"] == "train:1" and body["labels"] == {"kind": "train"}
    assert violations() == [("grandfathered", "at most 8 GPUs per workload, asked 16")]
    assert PolicyViolation.objects.get().workload_id == old.pk
    events = {(e["type"], e["code"], e["payload"].get("replaces")) for e in body["events"]}
    assert ("resubmitted", "RESUBMITTED", old.pk) in events
    assert [e["type"] for e in body["events"]].count("submitted") == 1
    assert any("grandfathered" in e["message"] for e in body["events"] if e["type"] == "policy")
    back = old.events.get(code="RESUBMITTED")
    assert back.type == "resubmitted" and back.payload["replaced_by"] == body["id"]


def test_resubmit_that_grows_is_judged_as_new(org, user_api):
    old = ended(user_api, state="failed")
    policy_create(user=org.admin, data=TIGHT)
    response = resubmit(user_api, old, {"pods": [{"count": 3, "flavors": ["a100-80g"],
                                                  "gpus": 8}]})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "rejected" and body["gpus"] == 24
    assert body["reason"] == {"code": "POLICY_DENIED", "message":
                              "at most 8 GPUs per workload, asked 24 (policy at-most-8)"}
    assert violations() == [("denied", "at most 8 GPUs per workload, asked 24")]


def test_resubmit_with_smaller_changes_is_grandfathered_and_sees_is_update(org, user_api):
    old = ended(user_api, state="cancelled")
    policy_create(user=org.admin, data=TIGHT)
    policy_create(user=org.admin, data={
        "name": "updates", "kind": "validate", "mode": "audit", "rule": "!request.is_update",
        "message": '"update of " + request.name'})
    response = resubmit(user_api, old, {"image": "train:2", "pods": [
        {"count": 1, "flavors": ["a100-80g"], "gpus": 8}, ]})
    assert response.status_code == 201, response.json()
    assert response.json()["state"] == "pending" and response.json()["image"] == "train:2"
    # 8 GPUs pass the tight rule; the audit rule saw is_update
    assert violations() == [("audited", "update of sweep")]


def test_resubmit_of_a_rejected_workload_is_not_grandfathered(org, user_api):
    policy_create(user=org.admin, data=TIGHT)
    rejected = submit(user_api)
    assert rejected.state == "rejected"
    response = resubmit(user_api, rejected)
    assert response.status_code == 201
    assert response.json()["state"] == "rejected"
    assert [o for o, _ in violations()] == ["denied", "denied"]


def test_resubmit_refuses_a_live_workload_bad_fields_and_unknown_fields(org, user_api):
    live = submit(user_api)
    response = resubmit(user_api, live)
    assert response.status_code == 400
    assert "only an ended" in response.json()["state"][0]
    old = ended(user_api, name="other")
    response = resubmit(user_api, old, {"pods": [{"count": 0, "flavors": [], "gpus": 99}],
                                        "priority_class": "nope", "gpu": 8})
    assert response.status_code == 400
    assert set(response.json()) == {"gpu"}  # unknown fields are named first
    response = resubmit(user_api, old, {"pods": [{"count": 0, "flavors": ["a100-80g"],
                                                  "gpus": 99}], "priority_class": "nope"})
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"pods"} and errors["pods"]["0"] == {
        "count": ["Ensure this value is greater than or equal to 1."],
        "gpus": ["Ensure this value is less than or equal to 64."]}
    response = resubmit(user_api, old, {"priority_class": "nope"})
    assert response.status_code == 400
    assert "unknown priority class 'nope'" in response.json()["priority_class"][0]
    assert Workload.objects.count() == 2  # nothing saved by the refused ones


def test_foreign_and_unknown_ids_are_404_and_unmanaged_ones_403(org, user_api):
    bob = UserFactory(username="bob")
    secret = QueueFactory(name="secret", parent=org.rd)
    team = Team.objects.create(name="secret", department=org.rd)
    team.queues.add(secret)
    TeamMembership.objects.create(team=team, user=bob)
    foreign = org.pending(secret, 8, name="hidden")
    workloads_set_state(Workload.objects.filter(pk=foreign.pk), "finished", owner=bob,
                        team=team)
    assert resubmit(user_api, foreign).status_code == 404
    assert user_api.patch(f"/api/v1/workloads/{foreign.pk}", {"image": "x"},
                          format="json").status_code == 404
    assert user_api.post("/api/v1/workloads/999999/resubmit", {}, format="json"
                         ).status_code == 404
    # visible to alice (her team's queue) but bob's: she may not restart or change it
    theirs = org.pending(org.team_a, 8, name="bobs")
    Workload.objects.filter(pk=theirs.pk).update(owner=bob)
    assert user_api.patch(f"/api/v1/workloads/{theirs.pk}", {"image": "x"},
                          format="json").status_code == 403


# --- PATCH a pending workload ----------------------------------------------------------------

def test_patch_that_does_not_grow_is_grandfathered_in_place(org, user_api):
    workload = submit(user_api)
    policy_create(user=org.admin, data=TIGHT)
    response = user_api.patch(f"/api/v1/workloads/{workload.pk}", {
        "priority_class": "batch-low", "labels": {"kind": "train", "try": "2"}}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["id"] == workload.pk and body["priority_class"] == "batch-low"
    assert body["labels"] == {"kind": "train", "try": "2"} and body["gpus"] == 16
    assert violations() == [("grandfathered", "at most 8 GPUs per workload, asked 16")]
    updated = [e for e in body["events"] if e["code"] == "UPDATED"]
    assert updated and updated[0]["payload"]["changed"] == ["labels", "priority_class"]
    assert [e["type"] for e in body["events"]][:2] == ["submitted", "updated"]


def test_patch_that_grows_is_refused_and_leaves_the_workload(org, user_api):
    workload = submit(user_api)
    policy_create(user=org.admin, data=TIGHT)
    response = user_api.patch(f"/api/v1/workloads/{workload.pk}", {
        "pods": [{"count": 3, "flavors": ["a100-80g"], "gpus": 8}]}, format="json")
    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["reasons"] == [{"code": "POLICY_DENIED", "message":
                                "at most 8 GPUs per workload, asked 24 (policy at-most-8)"}]
    assert body["workload"]["gpus"] == 16 and body["workload"]["state"] == "pending"
    assert list(PodSet.objects.filter(workload=workload).values_list("count", "gpus")) == [
        (2, 8)]
    assert violations() == [("denied", "at most 8 GPUs per workload, asked 24")]
    assert any(e["code"] == "POLICY_DENIED" and "refused" in e["message"]
               for e in body["workload"]["events"])


def test_patch_shrinking_passes_and_is_validated(org, user_api):
    workload = submit(user_api)
    url = f"/api/v1/workloads/{workload.pk}"
    response = user_api.patch(url, {"pods": [{"count": 1, "flavors": ["a100-80g"],
                                              "gpus": 8}]}, format="json")
    assert response.status_code == 200 and response.json()["gpus"] == 8
    response = user_api.patch(url, {"queue": "rd/team-b"}, format="json")
    assert response.status_code == 400 and "cannot move" in response.json()["queue"][0]
    response = user_api.patch(url, {"pods": [{"count": 1, "flavors": ["b200"], "gpus": 8}]},
                              format="json")
    assert response.status_code == 400
    assert "unknown flavor(s) b200" in response.json()["pods[0].flavors"][0]
    response = user_api.patch(url, {"duration_hint_s": 0}, format="json")
    assert response.status_code == 400 and "duration_hint_s" in response.json()
    workloads_set_state(Workload.objects.filter(pk=workload.pk), "running")
    response = user_api.patch(url, {"image": "x"}, format="json")
    assert response.status_code == 400 and "only a pending" in response.json()["state"][0]


# --- the page ---------------------------------------------------------------------------------

@pytest.fixture
def alice_browser(org):
    client = Client()
    client.force_login(org.alice)
    return client


def test_the_page_resubmit_button(org, user_api, alice_browser):
    old = ended(user_api)
    page = alice_browser.get(f"/workloads/{old.pk}/")
    assert f'action="/workloads/{old.pk}/resubmit/"' in page.content.decode()
    policy_create(user=org.admin, data=TIGHT)
    response = alice_browser.post(f"/workloads/{old.pk}/resubmit/")
    new = Workload.objects.exclude(pk=old.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/workloads/{new.pk}/"
    assert new.state == "pending" and new.gpus == 16
    assert violations() == [("grandfathered", "at most 8 GPUs per workload, asked 16")]
    page = alice_browser.get(f"/workloads/{new.pk}/").content.decode()
    assert f"resubmission of #{old.pk}" in page and f"resubmitted as #{new.pk}" in page
    assert 'resubmit/"' not in page  # a live workload has no Resubmit button
    response = alice_browser.post(f"/workloads/{new.pk}/resubmit/", follow=True)
    assert "Resubmit refused" in response.content.decode()
    assert alice_browser.post("/workloads/999999/resubmit/").status_code == 404


def test_patch_raising_the_priority_class_is_judged_as_new(org, user_api):
    workload = submit(user_api)
    policy_create(user=org.admin, data=TIGHT)
    url = f"/api/v1/workloads/{workload.pk}"
    response = user_api.patch(url, {"priority_class": "inference-high"}, format="json")
    assert response.status_code == 409
    assert response.json()["reasons"][0]["code"] == "POLICY_DENIED"
    assert Workload.objects.get(pk=workload.pk).priority_class.name == "training"


def test_patch_keeps_an_approval_unless_the_workload_grows(org, user_api, settings):
    from scheduling.request.approvals import workload_approve

    settings.ALLOT_APPROVAL_MAX_GPUS = 16
    workload = submit(user_api, gpus=24)
    assert Workload.objects.get(pk=workload.pk).needs_approval
    workload_approve(user=org.admin, workload=workload)
    url = f"/api/v1/workloads/{workload.pk}"
    response = user_api.patch(url, {"labels": {"kind": "eval"}}, format="json")
    assert response.status_code == 200
    assert not Workload.objects.get(pk=workload.pk).needs_approval
    response = user_api.patch(url, {"pods": [{"count": 4, "flavors": ["a100-80g"],
                                              "gpus": 8}]}, format="json")
    assert response.status_code == 200
    held = Workload.objects.get(pk=workload.pk)
    assert held.needs_approval and held.reason_code == "NEEDS_APPROVAL"
    assert "32 GPUs > 16" in held.reason_message
    response = user_api.patch(url, {"pods": [{"count": 2, "flavors": ["a100-80g"],
                                              "gpus": 8}]}, format="json")
    assert response.status_code == 200
    released = Workload.objects.get(pk=workload.pk)
    assert not released.needs_approval and released.reason_code == ""
