"""Approvals that hold: nobody decides their own request, ALLOT_MIN_APPROVERS different people
approve, every queue has approvers (its leads, else the platform admins), approvers are emailed
and see a badge, the requester hears of the decision; missing pages get the product's 404."""

from decimal import Decimal

import pytest
from django.core import mail
from django.core.cache import cache
from django.test.utils import override_settings

from portal.pages.approvers import approvers_for, inbox_count
from quotas.capacity.services import capacity_request_submit
from scheduling.models import Workload
from tests.factories import PASSWORD
from tests.integration.portal.conftest import api_for, held, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_badges():
    cache.clear()


def test_nobody_approves_their_own_workload(org, priority_classes):
    w = held(org.bob, name="bobs-big")  # bob leads vision: he decides its queue, not his own
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json")
    assert r.status_code == 403
    assert "bob requested workload bobs-big and may not decide it" in r.json()["detail"]
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/deny", {"comment": "no"},
                              format="json")
    assert r.status_code == 403
    assert Workload.objects.get(pk=w.pk).needs_approval is True
    assert api_for(org.bob).get("/api/v1/approvals").json()["workloads"] == []
    r = api_for(org.admin).post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json")
    assert r.status_code == 200 and r.json()["needs_approval"] is False


@override_settings(ALLOT_MIN_APPROVERS=2)
def test_two_approvers_needed_when_set(org, priority_classes):
    w = held(org.alice, name="long")
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/approve", {"comment": "ok"},
                              format="json")
    assert r.status_code == 200 and r.json()["needs_approval"] is True
    ev = w.events.get(code="APPROVAL_GIVEN")
    assert ev.actor == org.bob and ev.message == "approved by bob (1 of 2 approvals): ok"
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json")
    assert r.status_code == 403 and "already approved" in r.json()["detail"]
    assert api_for(org.bob).get("/api/v1/approvals").json()["workloads"] == []
    r = api_for(org.admin).post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json")
    assert r.status_code == 200 and r.json()["needs_approval"] is False
    assert w.events.get(code="APPROVED").actor == org.admin
    assert mail.outbox[-1].to == ["alice@example.org"]  # the requester hears of it


def test_capacity_requests_follow_the_same_rules(org):
    own = capacity_request_submit(user=org.bob, queue=org.vision, flavor=org.a100,
                                  resource="gpu", min=Decimal(12), max=None, justification="x")
    r = api_for(org.bob).post(f"/api/v1/capacity-requests/{own.pk}/approve", {},
                              format="json")
    assert r.status_code == 403 and "may not decide it" in r.json()["detail"]
    assert api_for(org.bob).get("/api/v1/approvals").json()["capacity_requests"] == []
    with override_settings(ALLOT_MIN_APPROVERS=2):
        other = capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                        resource="gpu", min=Decimal(10), max=None,
                                        justification="y")
        r = api_for(org.bob).post(f"/api/v1/capacity-requests/{other.pk}/approve", {},
                                  format="json")
        assert r.status_code == 200 and r.json()["state"] == "submitted"
        r = api_for(org.admin).post(f"/api/v1/capacity-requests/{other.pk}/approve", {},
                                    format="json")
        assert r.status_code == 200 and r.json()["state"] == "active"
    assert org.vision_q.__class__.objects.get(pk=org.vision_q.pk).min == Decimal(10)


def test_every_queue_has_an_approver_path(org):
    assert [u.username for u in approvers_for(org.vision.pk)] == ["bob"]
    # nlp has no lead, and bob does not decide his own: the platform admins do
    assert [u.username for u in approvers_for(org.nlp.pk)] == ["root"]
    assert [u.username for u in approvers_for(org.vision.pk, requester_id=org.bob.pk)] == [
        "root"]


@override_settings(ALLOT_APPROVAL_MAX_GPUS=2)
def test_approvers_are_emailed_and_see_a_badge(client, org, priority_classes,
                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        w = submit(org.alice, name="held-one")
    assert w.needs_approval
    sent = [m for m in mail.outbox if "Approval needed" in m.subject]
    assert len(sent) == 1 and sent[0].to == ["bob@example.org"]
    assert "held-one" in sent[0].subject and "4 GPUs > 2" in sent[0].body
    with django_capture_on_commit_callbacks(execute=True):
        capacity_request_submit(user=org.carol, queue=org.nlp, flavor=org.a100,
                                resource="gpu", min=Decimal(9), max=None, justification="z")
    assert mail.outbox[-1].to == ["root@example.org"]  # nlp has no lead: the admins
    assert inbox_count(org.bob) == 1 and inbox_count(org.alice) == 0
    assert client.login(username="bob", password=PASSWORD)
    html = client.get("/dashboard/").content.decode()
    assert 'id="approvals-badge"' in html and ">1<" in html
    client.post(f"/approvals/workloads/{w.pk}/approve/", {"comment": "go"})
    html = client.get("/dashboard/").content.decode()
    assert 'id="approvals-badge"' not in html  # the decider's badge is not stale


@override_settings(DEBUG=True)
def test_missing_pages_get_the_products_404_even_with_debug(client, org, priority_classes):
    assert client.login(username="bob", password=PASSWORD)
    for url in ("/no-such-page/", "/workloads/999999/", "/queues/q/nope/"):
        r = client.get(url)
        html = r.content.decode()
        assert r.status_code == 404, url
        assert "<h1>Not found</h1>" in html and "Django" not in html, url
        assert "Sign out" in html  # the product's frame, with its navigation
    assert client.get("/workloads").status_code == 301  # a missing slash is still added
    r = client.get("/api/v1/nope")
    assert r.status_code == 404 and r.json()["detail"].startswith("no API endpoint")
