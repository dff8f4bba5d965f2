"""Workloads above the approval thresholds (scheduling/request/approvals.py): the rule,
approve and deny (through the API); a submission holds big requests and the cycle waits for
the decision."""

import pytest
from django.core import mail
from django.test.utils import override_settings

from scheduling.models import Workload
from scheduling.request.approvals import approval_reason
from tests.integration.portal import conftest as portal_conftest
from tests.integration.portal.conftest import api_for, held, submission, submit

pytestmark = pytest.mark.django_db

# The portal tests' organisation and priority classes (tests/integration/portal/conftest.py).
org = portal_conftest.org
priority_classes = portal_conftest.priority_classes


def test_approval_reason_names_the_numbers():
    assert approval_reason(submission()) == ""
    big = submission(pods=[{"count": 5, "gpus": 8, "flavors": ["a100-80g"]}],
                     duration_hint_s=80 * 3600)
    assert approval_reason(big) == "needs approval: 40 GPUs > 32, expected 80 h > 72 h"
    with override_settings(ALLOT_APPROVAL_MAX_GPUS=64):
        assert approval_reason(big) == "needs approval: expected 80 h > 72 h"


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


# --- submission holds big requests; the cycle waits for the decision ------------------------

def big_org(org):
    """Room for a 40-GPU request: 6 nodes of 8 cards, vision's max raised to 48."""
    from decimal import Decimal

    from quotas.models import QuotaEntry
    from tests.factories import NodeFactory, quota_update

    for i in range(4, 6):
        NodeFactory(cluster=org.cluster, name=f"bj-a100-{i}", flavor=org.a100, gpus=8)
    quota_update(QuotaEntry.objects.filter(queue=org.rd), max=Decimal(64))
    quota_update(QuotaEntry.objects.filter(pk=org.vision_q.pk), max=Decimal(48))
    return org


BIG_PODS = [{"count": 5, "flavors": ["a100-80g"], "gpus": 8, "cpu": 16, "memory_gib": 128}]


def test_big_request_is_held_with_the_reason_and_in_the_inbox(org, priority_classes):
    big_org(org)
    r = api_for(org.alice).post("/api/v1/workloads",
                                submission(name="big", pods=BIG_PODS), format="json")
    assert r.status_code == 201, r.content
    w = Workload.objects.get(pk=r.json()["id"])
    assert w.state == "pending" and w.needs_approval is True
    assert (w.reason_code, w.reason_message) == ("NEEDS_APPROVAL",
                                                 "needs approval: 40 GPUs > 32")
    ev = w.events.get(code="NEEDS_APPROVAL")
    assert ev.type == "policy" and ev.message == "needs approval: 40 GPUs > 32"
    assert ev.payload == {"gpus": 40, "max_gpus": 32, "duration_hint_s": 3600,
                          "max_hours": 72.0}
    inbox = api_for(org.admin).get("/api/v1/approvals").json()
    assert [x["id"] for x in inbox["workloads"]] == [w.pk]
    assert inbox["workloads"][0]["gpus"] == 40


def test_small_request_is_not_held(org, priority_classes):
    w = submit(org.alice, name="small")
    assert w.needs_approval is False and w.reason_code == ""
    assert not w.events.filter(code="NEEDS_APPROVAL").exists()
    assert api_for(org.admin).get("/api/v1/approvals").json()["workloads"] == []


def test_long_request_is_held_and_bulk_holds_only_the_big_one(org, priority_classes):
    from scheduling.services import workloads_submit

    big_org(org)
    small, long, big = workloads_submit(user=org.alice, nudge=False, items=[
        submission(name="small"), submission(name="long", duration_hint_s=80 * 3600),
        submission(name="big", pods=BIG_PODS)])
    assert [small.needs_approval, long.needs_approval, big.needs_approval] == [
        False, True, True]
    assert Workload.objects.get(pk=long.pk).reason_message == \
        "needs approval: expected 80 h > 72 h"
    assert Workload.objects.filter(needs_approval=True).count() == 2


def test_held_is_not_admitted_until_approved(org, priority_classes):
    from scheduling.workers.cycle import cycle_run

    big_org(org)
    w = submit(org.alice, name="big", pods=BIG_PODS)
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == "pending" and not w.admissions.exists()
    assert w.reason_code == "NEEDS_APPROVAL"  # the cycle did not overwrite it
    r = api_for(org.bob).post(f"/api/v1/workloads/{w.pk}/approve", {"comment": "ok"},
                              format="json")
    assert r.status_code == 200, r.content
    w.refresh_from_db()
    assert w.needs_approval is False and w.reason_code == ""
    report = cycle_run(wait=True)
    assert report.admitted == [w.pk]
    w.refresh_from_db()
    # Admitted, and started at once: simulated clusters are dispatched inside the cycle.
    assert w.state == "running" and w.admissions.get().gpus == 40


def test_held_big_request_denied_ends_rejected(org, priority_classes):
    from scheduling.workers.cycle import cycle_run

    big_org(org)
    w = submit(org.alice, name="big", pods=BIG_PODS)
    r = api_for(org.admin).post(f"/api/v1/workloads/{w.pk}/deny",
                                {"comment": "use two 20-GPU jobs"}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "rejected"
    w.refresh_from_db()
    assert w.reason_message == "denied by root: use two 20-GPU jobs"
    assert w.finished_at is not None
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == "rejected" and not w.admissions.exists()


# --- a decision while a cycle is in flight -----------------------------------------------
# The cycle never reads a held workload (neither its pending heads nor its admitted work take
# one), so a decision and a cycle in flight touch different rows: neither waits for the other
# and neither undoes the other.


def _held_during_a_cycle(settings):
    from scheduling.services import workload_submit
    from tests.integration.scheduling.world import make_world, request

    settings.ALLOT_APPROVAL_MAX_GPUS = 4
    world = make_world(cluster_names=("bj",), nodes_per_cluster=2)
    held_w = workload_submit(user=world.alice, data=request("held", gpus=8), nudge=False)
    other = workload_submit(user=world.carol, data=request("other", queue="rd/nlp", gpus=4),
                            nudge=False)
    assert held_w.needs_approval and not other.needs_approval
    return world, held_w, other


def _admits_only(workload):
    def check(snapshot, result):
        assert [a.workload for a in result.admitted] == [str(workload.pk)]
    return check


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_an_approval_during_a_cycle_is_not_undone_and_the_next_cycle_admits(settings):
    from scheduling.request.approvals import workload_approve
    from scheduling.workers.cycle import cycle_run
    from tests.integration.scheduling.races import cycle_held, in_thread

    world, w, other = _held_during_a_cycle(settings)
    decisions: list = []
    with cycle_held(_admits_only(other)):
        in_thread(lambda: workload_approve(user=world.bob, workload=w, comment="go"),
                  decisions).join(20)
    assert decisions and decisions[0].needs_approval is False, decisions
    w.refresh_from_db()
    assert (w.state, w.needs_approval, w.reason_code) == ("pending", False, "")
    assert cycle_run(wait=True).admitted == [w.pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_denial_during_a_cycle_is_not_undone(settings):
    from scheduling.request.approvals import workload_deny
    from scheduling.workers.cycle import cycle_run
    from tests.integration.scheduling.races import cycle_held, in_thread

    world, w, other = _held_during_a_cycle(settings)
    decisions: list = []
    with cycle_held(_admits_only(other)):
        in_thread(lambda: workload_deny(user=world.bob, workload=w, comment="too big"),
                  decisions).join(20)
    assert decisions and decisions[0].state == "rejected", decisions
    assert cycle_run(wait=True).admitted == []
    w.refresh_from_db()
    assert (w.state, w.reason_code) == ("rejected", "APPROVAL_DENIED")
    assert not w.admissions.exists()
