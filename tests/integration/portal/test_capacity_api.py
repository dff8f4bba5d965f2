"""The capacity request API: submit, list, detail, approve, deny, cancel, comment, revert."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas.capacity.models import CapacityRequest
from quotas.capacity.services import capacity_requests_process_due
from quotas.models import QuotaEntry
from tests.integration.portal.conftest import api_for

URL = "/api/v1/capacity-requests"


def body(**over):
    data = {"queue": "rd/vision", "flavor": "a100-80g", "resource": "gpu", "min": 16,
            "max": 32, "justification": "CVPR deadline"}
    data.update(over)
    return data


@pytest.mark.django_db
def test_submit_then_admin_approves_applies_the_new_min(org):
    alice, admin = api_for(org.alice), api_for(org.admin)
    r = alice.post(URL, body(), format="json")
    assert r.status_code == 201, r.content
    created = r.json()
    assert created["state"] == "submitted"
    assert created["queue"] == "rd/vision" and created["min"] == 16 and created["max"] == 32
    assert [e["type"] for e in created["events"]] == ["submitted"]
    assert "min 8 -> 16" in created["events"][0]["message"]

    r = admin.post(f"{URL}/{created['id']}/approve", {"comment": "ok for Q3"}, format="json")
    assert r.status_code == 200, r.content
    done = r.json()
    assert done["state"] == "active"
    assert done["decided_by"] == "root" and done["decision_comment"] == "ok for Q3"
    assert done["previous"] == {"exists": True, "min": "8.000", "max": "32.000",
                                "lendable": None}
    assert [e["type"] for e in done["events"]] == ["submitted", "approved", "applied"]
    entry = QuotaEntry.objects.get(queue=org.vision, flavor=org.a100, resource="gpu")
    assert entry.min == Decimal(16) and entry.max == Decimal(32)
    assert len(mail.outbox) == 1 and "approved" in mail.outbox[0].subject
    assert mail.outbox[0].to == ["alice@example.org"]


@pytest.mark.django_db
def test_approval_that_breaks_a_tree_rule_is_refused_with_numbers(org):
    r = api_for(org.alice).post(URL, body(min=30), format="json")
    assert r.status_code == 201
    pk = r.json()["id"]
    r = api_for(org.admin).post(f"{URL}/{pk}/approve", {}, format="json")
    assert r.status_code == 400
    assert "rd: a100-80g/gpu: children's min 38 > min 32" in r.json()["detail"]
    assert CapacityRequest.objects.get(pk=pk).state == "submitted"
    assert QuotaEntry.objects.get(queue=org.vision, flavor=org.a100).min == Decimal(8)


@pytest.mark.django_db
def test_lead_decides_for_own_team_only(org):
    alice_req = api_for(org.alice).post(URL, body(min=12), format="json").json()
    carol_req = api_for(org.carol).post(URL, body(queue="rd/nlp", min=12), format="json").json()
    bob = api_for(org.bob)
    r = bob.post(f"{URL}/{alice_req['id']}/approve", {"comment": "fine"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "active"
    # bob cannot even see nlp's request: 404, never 403 (ids of other teams leak nothing)
    r = bob.post(f"{URL}/{carol_req['id']}/approve", {}, format="json")
    assert r.status_code == 404
    # alice sees her own request but is not a lead: refused
    other = api_for(org.alice).post(URL, body(max=40), format="json").json()
    r = api_for(org.alice).post(f"{URL}/{other['id']}/approve", {}, format="json")
    assert r.status_code == 403
    assert "may not decide" in r.json()["detail"]


@pytest.mark.django_db
def test_deny_needs_a_comment_and_notifies(org):
    pk = api_for(org.alice).post(URL, body(), format="json").json()["id"]
    admin = api_for(org.admin)
    r = admin.post(f"{URL}/{pk}/deny", {"comment": ""}, format="json")
    assert r.status_code == 400 and "comment" in r.json()
    r = admin.post(f"{URL}/{pk}/deny", {"comment": "no budget"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "denied"
    assert "denied" in mail.outbox[-1].subject
    r = admin.post(f"{URL}/{pk}/approve", {}, format="json")
    assert r.status_code == 400
    assert r.json() == {"state": [f"request #{pk} is denied, only submitted requests can be "
                                  "decided"]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("over", "field", "text"),
    [
        ({"queue": "rd/nope"}, "queue", "no queue 'rd/nope'"),
        ({"queue": "rd/nlp"}, "queue", "no queue 'rd/nlp'"),  # another team's queue
        ({"flavor": "h200"}, "flavor", "unknown flavor 'h200' (known: a100-80g)"),
        ({"min": -1}, "min", "greater than or equal to 0"),
        ({"min": None, "max": None}, "min", "give a new min, a new max, or both"),
        ({"min": 40, "max": 20}, "max", "max 20 < min 40"),
        ({"justification": ""}, "justification", "may not be blank"),
        ({"resource": "tpu"}, "resource", "not a valid choice"),
    ],
)
def test_bad_input_is_400_with_field_errors(org, over, field, text):
    r = api_for(org.alice).post(URL, body(**over), format="json")
    assert r.status_code == 400, r.content
    assert text in " ".join(r.json()[field])
    assert CapacityRequest.objects.count() == 0


@pytest.mark.django_db
def test_min_and_max_left_out_are_as_null(org):
    neither = {k: v for k, v in body().items() if k not in ("min", "max")}
    r = api_for(org.alice).post(URL, neither, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["min"] == ["give a new min, a new max, or both"]
    assert CapacityRequest.objects.count() == 0
    r = api_for(org.alice).post(URL, {**neither, "max": 40}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["min"] is None and r.json()["max"] == 40


@pytest.mark.django_db
def test_period_must_be_ordered(org):
    now = timezone.now()
    r = api_for(org.alice).post(URL, body(starts_at=(now + dt.timedelta(days=2)).isoformat(),
                                         ends_at=(now + dt.timedelta(days=1)).isoformat()),
                                format="json")
    assert r.status_code == 400 and "is not after starts_at" in r.json()["ends_at"][0]


@pytest.mark.django_db
def test_foreign_ids_are_404_and_anonymous_401(org):
    pk = api_for(org.alice).post(URL, body(), format="json").json()["id"]
    carol = api_for(org.carol)
    assert carol.get(f"{URL}/{pk}").status_code == 404
    assert carol.post(f"{URL}/{pk}/cancel").status_code == 404
    assert carol.post(f"{URL}/{pk}/comments", {"message": "hi"}, format="json").status_code == 404
    assert api_for(org.bob).get(f"{URL}/{pk}").status_code == 200
    from rest_framework.test import APIClient
    assert APIClient().get(URL).status_code == 401


@pytest.mark.django_db
def test_list_filters_and_scopes(org):
    alice, carol = api_for(org.alice), api_for(org.carol)
    alice.post(URL, body(), format="json")
    alice.post(URL, body(min=10), format="json")
    carol.post(URL, body(queue="rd/nlp", min=10), format="json")
    assert api_for(org.admin).get(URL).json()["count"] == 3
    data = alice.get(URL).json()
    assert data["count"] == 2 and {r["queue"] for r in data["results"]} == {"rd/vision"}
    assert api_for(org.admin).get(URL, {"queue": "rd/nlp"}).json()["count"] == 1
    assert alice.get(URL, {"state": "denied"}).json()["count"] == 0
    assert alice.get(URL, {"state": "bogus"}).status_code == 400


@pytest.mark.django_db
def test_list_query_budget(org):
    alice = api_for(org.alice)
    for m in range(20):
        alice.post(URL, body(min=9 + m), format="json")
    admin = api_for(org.admin)
    with CaptureQueriesContext(connection) as ctx:
        r = admin.get(URL)
    assert r.json()["count"] == 20
    assert len(ctx.captured_queries) <= 6, [q["sql"] for q in ctx.captured_queries]


@pytest.mark.django_db
def test_cancel_and_comment(org):
    alice = api_for(org.alice)
    pk = alice.post(URL, body(), format="json").json()["id"]
    r = alice.post(f"{URL}/{pk}/comments", {"message": "  also need 2 more nodes "},
                   format="json")
    assert r.status_code == 200
    assert r.json()["events"][-1]["message"] == "also need 2 more nodes"
    assert alice.post(f"{URL}/{pk}/comments", {"message": ""}, format="json").status_code == 400
    r = alice.post(f"{URL}/{pk}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert alice.post(f"{URL}/{pk}/cancel").status_code == 400


@pytest.mark.django_db
def test_future_period_is_applied_then_reverted_by_the_worker(org):
    now = timezone.now()
    starts, ends = now + dt.timedelta(hours=1), now + dt.timedelta(hours=5)
    pk = api_for(org.alice).post(
        URL, body(min=16, max=None, starts_at=starts.isoformat(), ends_at=ends.isoformat()),
        format="json",
    ).json()["id"]
    r = api_for(org.admin).post(f"{URL}/{pk}/approve", {}, format="json")
    assert r.json()["state"] == "approved"
    assert QuotaEntry.objects.get(queue=org.vision).min == Decimal(8)
    assert capacity_requests_process_due(now=now) == {"applied": 0, "reverted": 0, "failed": 0}
    assert capacity_requests_process_due(now=starts) == {"applied": 1, "reverted": 0,
                                                         "failed": 0}
    entry = QuotaEntry.objects.get(queue=org.vision)
    assert entry.min == Decimal(16) and entry.max == Decimal(32)
    assert capacity_requests_process_due(now=ends) == {"applied": 0, "reverted": 1, "failed": 0}
    entry = QuotaEntry.objects.get(queue=org.vision)
    assert entry.min == Decimal(8) and entry.max == Decimal(32)
    req = CapacityRequest.objects.get(pk=pk)
    assert req.state == "reverted"
    assert [e.type for e in req.events.all()] == ["submitted", "approved", "applied", "reverted"]


@pytest.mark.django_db
def test_revert_that_would_break_the_tree_is_held_and_said_once(org):
    now = timezone.now()
    ends = now + dt.timedelta(hours=1)
    pk = api_for(org.alice).post(URL, body(min=16, ends_at=ends.isoformat()),
                                 format="json").json()["id"]
    api_for(org.admin).post(f"{URL}/{pk}/approve", {}, format="json")
    # meanwhile a child queue takes the new min: restoring min 8 would break V2 on rd/vision
    from tests.factories import QueueFactory, QuotaEntryFactory
    child = QueueFactory(name="big", parent=org.vision)
    QuotaEntryFactory(queue=child, flavor=org.a100, min=Decimal(12))
    for _ in range(2):
        assert capacity_requests_process_due(now=ends)["failed"] == 1
    req = CapacityRequest.objects.get(pk=pk)
    assert req.state == "active"
    failed = [e for e in req.events.all() if e.type == "revert_failed"]
    assert len(failed) == 1
    assert "rd/vision: a100-80g/gpu: children's min 12 > min 8" in failed[0].message


@pytest.mark.django_db
def test_min_and_max_are_each_optional_but_not_both(org):
    """API.md's body names both; either may be left out (unchanged), not both."""
    alice = api_for(org.alice)
    data = body(max=40)
    del data["min"]
    r = alice.post(URL, data, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["min"] is None and r.json()["max"] == 40
    assert "min 8 (unchanged), max 32 -> 40" in r.json()["events"][0]["message"]
    data = body(min=12)
    del data["max"]
    r = alice.post(URL, data, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["min"] == 12 and r.json()["max"] is None
    data = body()
    del data["min"], data["max"]
    r = alice.post(URL, data, format="json")
    assert r.status_code == 400
    assert r.json() == {"min": ["give a new min, a new max, or both"]}
    assert CapacityRequest.objects.count() == 2
