"""Workloads above the approval thresholds: the rule, the inbox API, approve and deny."""

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from quotas.capacity.services import capacity_request_submit
from scheduling.approvals import approval_reason
from scheduling.models import Workload
from tests.integration.portal.conftest import api_for, submission, submit

pytestmark = pytest.mark.django_db


def held(user, **over):
    w = submit(user, **over)
    Workload.objects.filter(pk=w.pk).update(needs_approval=True)
    return w


def test_approval_reason_names_the_numbers():
    assert approval_reason(submission()) == ""
    big = submission(pods=[{"count": 5, "gpus": 8, "flavors": ["a100-80g"]}],
                     duration_hint_s=80 * 3600)
    assert approval_reason(big) == "needs approval: 40 GPUs > 32, expected 80 h > 72 h"
    with override_settings(ALLOT_APPROVAL_MAX_GPUS=64):
        assert approval_reason(big) == "needs approval: expected 80 h > 72 h"


def test_inbox_lists_what_the_user_decides(org, priority_classes):
    w = held(org.alice, name="long")
    capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100, resource="gpu",
                            min=12, max=None, justification="x")
    data = api_for(org.bob).get("/api/v1/approvals").json()
    assert [r["id"] for r in data["workloads"]] == [w.pk]
    assert data["workloads"][0]["gpus"] == 4 and data["workloads"][0]["owner"] == "alice"
    assert [r["queue"] for r in data["capacity_requests"]] == ["rd/vision"]
    carol = api_for(org.carol).get("/api/v1/approvals").json()
    assert carol == {"capacity_requests": [], "workloads": []}


def test_approve_lets_the_cycle_see_it(org, priority_classes):
    w = held(org.alice, name="long")
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/approve", {"comment": "go"},
                              format="json")
    assert r.status_code == 200, r.content
    assert r.json()["needs_approval"] is False and r.json()["state"] == "pending"
    ev = w.events.get(code="APPROVED")
    assert ev.actor == org.bob and ev.message == "approved by bob: go"
    assert mail.outbox[-1].to == ["alice@example.org"]
    # decided once: the second call finds nothing waiting
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json")
    assert r.status_code == 404


def test_deny_rejects_with_the_comment(org, priority_classes):
    w = held(org.alice, name="long")
    admin = api_for(org.admin)
    r = admin.post(f"/api/v1/workloads/{w.pk}/deny", {"comment": ""}, format="json")
    assert r.status_code == 400 and r.json() == {"comment": ["say why the workload is denied"]}
    r = admin.post(f"/api/v1/workloads/{w.pk}/deny", {"comment": "too long"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "rejected"
    w.refresh_from_db()
    assert w.reason_code == "APPROVAL_DENIED" and w.reason_message == "denied by root: too long"
    assert w.events.filter(type="rejected", code="APPROVAL_DENIED").count() == 1


def test_foreign_and_not_held_are_404(org, priority_classes):
    w = held(org.alice, name="long")
    free = submit(org.alice, name="free")
    carol = api_for(org.carol)
    assert carol.post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json").status_code == 404
    admin = api_for(org.admin)
    assert admin.post(f"/api/v1/workloads/{free.pk}/approve", {},
                      format="json").status_code == 404
    assert Workload.objects.get(pk=w.pk).needs_approval is True


def test_inbox_query_budget(org, priority_classes):
    for i in range(20):
        held(org.alice, name=f"w{i}")
        capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                resource="gpu", min=9 + i, max=None, justification="x")
    admin = api_for(org.admin)
    with CaptureQueriesContext(connection) as ctx:
        data = admin.get("/api/v1/approvals").json()
    assert len(data["workloads"]) == 20 and len(data["capacity_requests"]) == 20
    assert len(ctx.captured_queries) <= 8, [q["sql"] for q in ctx.captured_queries]
