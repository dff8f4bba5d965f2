"""Portal pages: what each shows, who may see it (others' ids 404), CSRF, query budgets."""

import re
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas.capacity.services import capacity_request_submit
from quotas.models import Queue, QuotaEntry
from scheduling.models import Admission, Workload
from tests.factories import PASSWORD, workloads_set_state
from tests.integration.portal.conftest import pod_rows, submit

pytestmark = pytest.mark.django_db


def login(client: Client, user) -> Client:
    assert client.login(username=user.username, password=PASSWORD)
    return client


def admit(workload: Workload, cluster, flavor, *, borrowed: bool = False) -> Admission:
    """Record an admission as the cycle would (state reserved, one open interval)."""
    now = timezone.now()
    gpus = sum(p.count * p.gpus for p in workload.pod_sets.all())
    workloads_set_state(Workload.objects.filter(pk=workload.pk), "running",
                        state_changed_at=now)
    return Admission.objects.create(workload=workload, cluster=cluster, flavor=flavor,
                                    nodes=["bj-a100-0"], borrowed=borrowed, gpus=gpus,
                                    reserved_at=now, running_at=now)


def test_pages_need_login(client):
    for url in ("/dashboard/", "/workloads/", "/workloads/new/", "/capacity-requests/",
                "/approvals/", "/queues/", "/fleet/"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/login/"), url


def test_dashboard_shows_queue_standing_and_headroom(client, org, priority_classes):
    w = submit(org.alice, name="big", pods=[{"count": 2, "flavors": ["a100-80g"], "gpus": 6,
                                             "cpu": 8, "memory_gib": 64}])
    admit(w, org.cluster, org.a100, borrowed=True)
    submit(org.alice, name="waiting")
    r = login(client, org.alice).get("/dashboard/")
    html = r.content.decode()
    assert r.status_code == 200
    assert "rd/vision" in html and "rd/nlp" not in html
    assert 'used <span class="used">12</span> · min <span class="min">8</span> · max 32' in html
    assert "borrowed 4" in html
    assert "1 pending workload" in html
    assert ">big</a>" in html and ">waiting</a>" in html
    # fleet headroom: 32 a100 GPUs on 4 ready nodes, 12 used
    assert '<td data-label="Free" class="num gpus-free"><strong>20</strong>' in html
    live = client.get("/dashboard/", HTTP_HX_REQUEST="true").content.decode()
    assert live.startswith('<div id="dashboard-live"') and "<html" not in live
    assert 'hx-trigger="every 10s"' in live and "rd/vision" in live
    # an admin in no team sees the top-level queues (the whole tree is on the tree page)
    html = login(Client(), org.admin).get("/dashboard/").content.decode()
    assert "Top-level queues" in html and ">rd</a>" in html and "rd/vision" not in html


def test_request_form_live_feedback_and_submit(client, org, priority_classes):
    c = login(client, org.alice)
    r = c.get("/workloads/new/")
    assert r.status_code == 200
    assert 'hx-post="/workloads/new/check/"' in r.content.decode()
    form = {"queue": "rd/vision", "name": "sweep-1", "flavor_1": "a100-80g",
            **pod_rows({"count": 2, "gpus": 4, "cpu": 8, "memory_gib": 64}),
            "priority_class": "training",
            "preemptible": "on", "checkpoint": "on", "command": "python train.py --lr 0.1"}
    r = c.post("/workloads/new/check/", form)
    html = r.content.decode()
    assert "<strong>8 GPUs</strong>" in html
    assert "a100-80g: <span class=\"pill-ok\">yes</span>" in html
    assert "<strong>32</strong> more GPUs; <strong>8</strong> of them within its guarantee" in html
    assert "Within guarantee" in html and "Estimated start: <strong>now" in html
    # 12 GPUs > the 8 guaranteed: it would borrow
    r = c.post("/workloads/new/check/", {**form, "pods-0-count": 3})
    assert "It would borrow</span> (12 &gt; 8 guaranteed left)" in r.content.decode()
    # 5 pods x 8 GPUs = 40 > max 32: never
    r = c.post("/workloads/new/check/", {**form, "pods-0-count": 5, "pods-0-gpus": 8})
    html = r.content.decode()
    assert "never" in html and "QUOTA_MAX" in html and "it would be rejected" in html
    assert 'id="submit-request" hx-swap-oob="true" disabled' in html
    r = c.post("/workloads/new/", {**form, "pods-0-count": 5, "pods-0-gpus": 8})
    assert r.status_code == 400 and not Workload.objects.exists()
    html = r.content.decode()
    assert ("a100-80g: This workload asks for 40 a100-80g GPUs, more than queue rd/vision may "
            "ever use (32 at most)") in html
    assert "(QUOTA_MAX: queue rd/vision a100-80g/gpu" in html  # the exact text after it
    r = c.post("/workloads/new/", form)
    w = Workload.objects.get(name="sweep-1")
    assert r.status_code == 302 and r["Location"] == f"/workloads/{w.pk}/"
    assert w.command == ["python", "train.py", "--lr", "0.1"]
    assert [(p.count, p.gpus, p.flavors) for p in w.pod_sets.all()] == [(2, 4, ["a100-80g"])]


def test_request_form_field_errors(client, org, priority_classes):
    c = login(client, org.alice)
    r = c.post("/workloads/new/", {"queue": "rd/nlp", "name": "Bad Name", "flavor_1": "a100-80g",
                                   **pod_rows({"count": 1, "gpus": 1, "cpu": 1,
                                               "memory_gib": 1}),
                                   "priority_class": "training"})
    html = r.content.decode()
    assert r.status_code == 200
    assert "Select a valid choice" in html  # rd/nlp is not one of alice's queues
    r = c.post("/workloads/new/", {"queue": "rd/vision", "name": "Bad Name",
                                   "flavor_1": "a100-80g",
                                   **pod_rows({"count": 1, "gpus": 1, "cpu": 1,
                                               "memory_gib": 1}),
                                   "priority_class": "training"})
    assert "is not DNS-safe" in r.content.decode()
    assert not Workload.objects.exists()


def test_workload_page_polls_while_live_and_stops_when_ended(client, org, priority_classes):
    w = submit(org.alice, name="job")
    c = login(client, org.alice)
    html = c.get(f"/workloads/{w.pk}/").content.decode()
    assert f'hx-get="/workloads/{w.pk}/live/" hx-trigger="every 10s"' in html
    assert "Place in rd/vision: <strong>1</strong>" in html
    assert "Submitted" in html
    r = c.post(f"/workloads/{w.pk}/cancel/")
    assert r.status_code == 302
    live = c.get(f"/workloads/{w.pk}/live/").content.decode()
    assert "hx-trigger" not in live and 'data-live="false"' in live
    assert "Cancelled" in live and "cancelled by alice" in live


def test_rejected_workload_says_why(client, org, priority_classes):
    w = submit(org.alice, name="huge", pods=[{"count": 5, "flavors": ["a100-80g"], "gpus": 8,
                                              "cpu": 8, "memory_gib": 64}])
    assert w.state == "rejected"
    html = login(client, org.alice).get(f"/workloads/{w.pk}/").content.decode()
    assert "Why it was rejected" in html and "QUOTA_MAX" in html


def test_foreign_ids_are_404(client, org, priority_classes):
    w = submit(org.alice, name="mine")
    req = capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                  resource="gpu", min=Decimal(12), max=None,
                                  justification="more")
    c = login(client, org.carol)
    for url in (f"/workloads/{w.pk}/", f"/workloads/{w.pk}/live/",
                f"/capacity-requests/{req.pk}/", "/queues/q/rd/vision/"):
        assert c.get(url).status_code == 404, url
    assert c.post(f"/workloads/{w.pk}/cancel/").status_code == 404
    assert c.post(f"/capacity-requests/{req.pk}/approve/").status_code == 404
    assert Workload.objects.get(pk=w.pk).state == "pending"


def test_csrf_is_enforced(org, priority_classes):
    c = login(Client(enforce_csrf_checks=True), org.alice)
    r = c.post("/workloads/new/", {"queue": "rd/vision"})
    assert r.status_code == 403
    r = c.get("/workloads/new/")
    assert 'name="csrfmiddlewaretoken"' in r.content.decode()
    assert "X-CSRFToken" in r.content.decode()  # htmx requests send it too


def test_capacity_request_pages_and_inbox_approval(client, org):
    c = login(client, org.alice)
    r = c.post("/capacity-requests/new/", {"queue": "rd/vision", "flavor": "a100-80g",
                                           "resource": "gpu", "min": "16",
                                           "justification": "deadline"})
    assert r.status_code == 302
    pk = int(r["Location"].strip("/").split("/")[-1])
    html = c.get(r["Location"]).content.decode()
    assert "Submitted" in html and "<strong>16</strong>" in html and "Approve" not in html
    decider = login(Client(), org.admin).get(r["Location"]).content.decode()
    assert "The tree's rules hold with this change" in decider
    assert 'Max</dt><dd id="change-max">32 → unchanged' in html
    listing = c.get("/capacity-requests/").content.decode()
    assert '<td data-label="New min" class="num">16</td>' in listing
    assert '<td data-label="New max" class="num">–</td>' in listing
    admin = login(Client(), org.admin)
    inbox = admin.get("/approvals/").content.decode()
    assert f'id="cr-{pk}"' in inbox
    r = admin.post(f"/capacity-requests/{pk}/approve/", {"comment": "ok",
                                                         "next": "/approvals/"})
    assert r["Location"] == "/approvals/"
    assert QuotaEntry.objects.get(queue=org.vision, flavor=org.a100).min == Decimal(16)
    html = c.get("/queues/q/rd/vision/").content.decode()
    assert '<td data-label="Min" class="num quota-min">16</td>' in html


def test_capacity_approval_breaking_a_rule_shows_the_reason(client, org):
    req = capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                  resource="gpu", min=Decimal(30), max=None,
                                  justification="more")
    admin = login(client, org.admin)
    page = admin.get(f"/capacity-requests/{req.pk}/").content.decode()
    assert "Approving would break the tree" in page
    assert "rd: a100-80g/gpu: children&#x27;s min 38 &gt; min 32" in page
    r = admin.post(f"/capacity-requests/{req.pk}/approve/", follow=True)
    assert "children&#x27;s min 38 &gt; min 32" in r.content.decode()


def test_workload_approval_inbox(client, org, priority_classes):
    w = submit(org.alice, name="long")
    Workload.objects.filter(pk=w.pk).update(needs_approval=True)
    lead = login(client, org.bob)
    assert f'id="wl-{w.pk}"' in lead.get("/approvals/").content.decode()
    carol = login(Client(), org.carol)
    assert f'id="wl-{w.pk}"' not in carol.get("/approvals/").content.decode()
    assert carol.post(f"/approvals/workloads/{w.pk}/approve/").status_code == 404
    r = lead.post(f"/approvals/workloads/{w.pk}/deny/", {"comment": ""}, follow=True)
    assert "say why the workload is denied" in r.content.decode()
    lead.post(f"/approvals/workloads/{w.pk}/approve/", {"comment": "go"})
    w.refresh_from_db()
    assert not w.needs_approval
    assert w.events.filter(type="policy", code="APPROVED", actor=org.bob).exists()


def test_tree_editor_checks_before_saving_and_saves(client, org):
    admin = login(client, org.admin)
    html = admin.get("/queues/").content.decode()
    vid = org.vision.pk
    name = f"c|{vid}|a100-80g|gpu|min"
    assert f'name="{name}" value="8"' in html
    r = admin.post("/queues/check/", {name: "30", f"c|{vid}|a100-80g|gpu|max": "32"})
    html = r.content.decode()
    assert "rd: a100-80g/gpu: children&#x27;s min 38 &gt; min 32" in html  # the details
    assert f'<template><td id="problems-{org.rd.pk}"' in html and 'hx-swap-oob="true"' in html
    r = admin.post("/queues/", {name: "30", f"c|{vid}|a100-80g|gpu|max": "32"})
    assert r.status_code == 400
    assert QuotaEntry.objects.get(queue=org.vision).min == Decimal(8)
    r = admin.post("/queues/check/", {name: "x"})
    assert ("rd/vision: a100-80g/gpu: min: &#x27;x&#x27; is not a Kubernetes quantity"
            in r.content.decode())
    r = admin.post("/queues/", {name: "12", f"c|{vid}|a100-80g|gpu|max": "32"})
    assert r.status_code == 302
    assert QuotaEntry.objects.get(queue=org.vision).min == Decimal(12)
    # researchers see their part of the tree, read-only, and cannot post
    alice = login(Client(), org.alice)
    html = alice.get("/queues/").content.decode()
    assert "rd/vision" in html and "rd/nlp" not in html and "<input" not in html.split(
        "<table")[1]
    assert alice.post("/queues/", {name: "1"}).status_code == 403


def test_tree_editor_refuses_numbers_the_column_cannot_hold(client, org):
    admin = login(client, org.admin)
    cell = f"c|{org.vision.pk}|a100-80g|gpu|max"
    for value, says in (("1e309", "&#x27;1e309&#x27;: exponent out of range"),
                        ("99999999999999999999999",
                         "99999999999999999999999 is too large (below 100000000000 GPUs)"),
                        ("1.0001", "1.0001: GPUs are whole cards"),
                        ("4Q", "&#x27;4Q&#x27; is not a Kubernetes quantity")):
        r = admin.post("/queues/", {cell: value})
        assert r.status_code == 400
        assert f"rd/vision: a100-80g/gpu: max: {says}" in r.content.decode()
    assert QuotaEntry.objects.get(queue=org.vision).max == Decimal(32)


def test_adding_a_queue_under_a_parent_that_is_no_queue_is_refused(client, org):
    admin = login(client, org.admin)
    for parent in ("2026-02-30", "\u00b2", "999999"):
        r = admin.post("/queues/add/", {"parent": parent, "name": "extra"}, follow=True)
        assert f"Queue not added: no parent queue with id &#x27;{parent}&#x27;" in (
            r.content.decode())
    assert not Queue.objects.filter(name="extra").exists()


def test_fleet_and_cluster_pages(client, org, priority_classes):
    w = submit(org.alice, name="run")
    admit(w, org.cluster, org.a100)
    c = login(client, org.alice)
    html = c.get("/fleet/").content.decode()
    assert ">bj</a>" in html and '<strong>28</strong>' in html
    assert 'id="chart-allocation-data"' in html and "plotly-basic.min.js" in html
    html = c.get("/fleet/bj/").content.decode()
    assert "bj-a100-3" in html
    assert c.get("/fleet/nope/").status_code == 404


def test_the_fleet_page_shows_shared_cards(client, org, priority_classes):
    """Per node, the cards holding fractions: pods, free share and GPU memory free per card
    (a slice given by the pod set, else the share of the card's 80 GiB)."""
    from scheduling.models import PodSet

    w = submit(org.alice, name="quarters")
    PodSet.objects.filter(workload=w).update(count=3, gpus=Decimal("0.25"))
    adm = admit(w, org.cluster, org.a100)
    Admission.objects.filter(pk=adm.pk).update(nodes=["bj-a100-0"] * 3, cards=[0, 0, 2],
                                               gpus=Decimal("0.75"))
    v = submit(org.alice, name="slice")
    PodSet.objects.filter(workload=v).update(gpus=Decimal("0.5"), gpu_memory_gib=10)
    adm = admit(v, org.cluster, org.a100)
    Admission.objects.filter(pk=adm.pk).update(cards=[2], gpus=Decimal("0.5"))
    c = login(client, org.alice)
    html = c.get("/fleet/").content.decode()
    table = html.split('id="shared-cards"')[1].split("</table>")[0]
    row = table.split("<td data-label=\"Node\">bj-a100-0</td>")[1].split("</tr>")[0]
    assert '<td data-label="Cards shared" class="num">2</td>' in row
    assert '<td data-label="Free share" class="num">0.75</td>' in row  # 0.5 + 0.25
    assert "card 0: 2 pods, <strong>0.5</strong> free, 40 GiB" in row
    assert "card 2: 2 pods, <strong>0.25</strong> free, 50 GiB" in row  # 80 - 20 - 10
    Admission.objects.update(ended_at=timezone.now())
    assert "No card holds a fraction now." in c.get("/fleet/").content.decode()


# Queries per page, independent of how many rows it lists (no N+1); the session and the user
# are 2 of them.
# A History section costs its page nothing: its rows load after the page (/history/section/).
# /fleet/ reads the cards that hold fractions (its "Shared cards" section) too.
BUDGETS = {"/workloads/": 6, "/capacity-requests/": 6, "/approvals/": 8, "/dashboard/": 20,
           "/fleet/": 13, "/queues/": 10}


@pytest.mark.parametrize("url", list(BUDGETS))
def test_list_pages_query_budget(client, org, priority_classes, url):
    for i in range(25):
        w = submit(org.alice, name=f"w{i}")
        if i % 3 == 0:
            Workload.objects.filter(pk=w.pk).update(needs_approval=True)
        capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                resource="gpu", min=Decimal(9 + i), max=None,
                                justification="x")
    c = login(client, org.admin)
    c.get(url)  # warm caches (content types, sessions)
    with CaptureQueriesContext(connection) as ctx:
        r = c.get(url)
    assert r.status_code == 200
    assert len(ctx.captured_queries) <= BUDGETS[url], [q["sql"] for q in ctx.captured_queries]


def test_workload_list_filters_and_sorts(client, org, priority_classes):
    from tests.factories import FlavorFactory

    FlavorFactory(name="h100-80g")
    submit(org.alice, name="a-first")
    submit(org.alice, name="b-h100", pods=[{"count": 1, "flavors": ["h100-80g", "a100-80g"],
                                            "gpus": 1, "cpu": 1, "memory_gib": 1}])
    submit(org.carol, name="carols", queue="rd/nlp")
    c = login(client, org.alice)

    def names(query: str) -> list[str]:
        html = c.get(f"/workloads/?{query}").content.decode()
        return re.findall(r'<td data-label="Name"><a href="/workloads/\d+/">([\w-]+)</a>', html)

    assert names("") == ["b-h100", "a-first"]  # newest first; carol's are not alice's to see
    assert names("ordering=name") == ["a-first", "b-h100"]
    assert names("flavor=h100-80g") == ["b-h100"]
    assert names("state=pending&queue=rd/vision&ordering=-name") == ["b-h100", "a-first"]
    today = timezone.now().date().isoformat()
    assert names(f"submitted_after={today}") == ["b-h100", "a-first"]
    assert names("submitted_before=2000-01-01") == []
    assert names("state=finished") == []


def test_schema_documents_the_portal_endpoints(client, org):
    schema = login(client, org.admin).get("/api/schema/").content.decode()
    for path in ("/api/v1/capacity-requests:", "/api/v1/capacity-requests/{id}/approve:",
                 "/api/v1/capacity-requests/{id}/deny:", "/api/v1/approvals:",
                 "/api/v1/workloads/{id}/approve:", "/api/v1/workloads/{id}/deny:"):
        assert path in schema, path


class _Controls(HTMLParser):
    """Collects form controls and label targets, to check every control is labelled."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[dict] = []
        self.label_for: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "label" and a.get("for"):
            self.label_for.add(a["for"])
        if tag in ("input", "select", "textarea") and a.get("type") not in ("hidden", "submit"):
            self.controls.append(a)


@pytest.mark.parametrize("url", ["/workloads/new/", "/capacity-requests/new/", "/queues/",
                                 "/workloads/", "/capacity-requests/", "/approvals/"])
def test_every_control_has_a_label(client, org, priority_classes, url):
    req = capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                  resource="gpu", min=Decimal(12), max=None, justification="x")
    assert req.pk
    parser = _Controls()
    parser.feed(login(client, org.admin).get(url).content.decode())
    assert parser.controls, url
    unlabelled = [c.get("name") for c in parser.controls
                  if not c.get("aria-label") and c.get("id") not in parser.label_for]
    assert unlabelled == [], (url, unlabelled)
