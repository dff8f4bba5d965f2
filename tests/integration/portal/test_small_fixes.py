"""The issue's smaller items: a capacity request's change after approval, the request form
(GPU models only, a bad or taken name flagged live), cancel's confirmation, "My workloads"
refreshing while something can change, one-day cost charts labelled by day."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from billing.charts import spend_by_team_figure
from quotas.capacity.services import capacity_request_approve, capacity_request_submit
from scheduling.services import workload_cancel
from tests.factories import PASSWORD, FlavorFactory
from tests.integration.portal.conftest import pod_rows, submit

pytestmark = pytest.mark.django_db


def login(client: Client, user) -> Client:
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_an_applied_capacity_request_shows_the_value_before_it(client, org):
    req = capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                  resource="gpu", min=Decimal(16), max=None, justification="x")
    capacity_request_approve(user=org.bob, request=req)
    html = login(client, org.alice).get(f"/capacity-requests/{req.pk}/").content.decode()
    assert '<dd id="change-min">8 → <strong>16</strong></dd>' in html


FORM = {"queue": "rd/vision", "name": "sweep-1", "flavor_1": "a100-80g",
        **pod_rows({"count": 1, "gpus": 4, "cpu": 8, "memory_gib": 64}),
        "priority_class": "training", "preemptible": "on", "checkpoint": "on"}


def test_request_form_offers_gpu_models_and_flags_names_live(client, org, priority_classes):
    FlavorFactory(name="cpu", gpu_memory_gib=None)
    c = login(client, org.alice)
    html = c.get("/workloads/new/").content.decode()
    assert '<option value="a100-80g"' in html and '<option value="cpu"' not in html
    html = c.post("/workloads/new/check/", {**FORM, "name": "Bad_Name"}).content.decode()
    assert "&#x27;Bad_Name&#x27; is not DNS-safe" in html
    assert 'title="Change the name first">Submit request</button>' in html
    held = submit(org.alice, name="sweep-1")
    html = c.post("/workloads/new/check/", FORM).content.decode()
    assert (f"a workload named &#x27;sweep-1&#x27; is already pending in rd/vision "
            f"(#{held.pk})") in html
    assert "disabled" in html


def test_cancel_asks_for_confirmation(client, org, priority_classes):
    w = submit(org.alice, name="job")
    html = login(client, org.alice).get(f"/workloads/{w.pk}/").content.decode()
    assert 'data-confirm="Cancel job? Its pods are stopped' in html


def test_my_workloads_refresh_while_something_can_change(client, org, priority_classes):
    w = submit(org.alice, name="job")
    c = login(client, org.alice)
    html = c.get("/workloads/?state=pending").content.decode()
    assert 'hx-get="/workloads/?state=pending" hx-trigger="every 10s"' in html
    assert "As of " in html and "updates every 10 s" in html
    part = c.get("/workloads/", HTTP_HX_REQUEST="true").content.decode()
    assert part.lstrip().startswith('<div id="workload-table"') and "<html" not in part
    workload_cancel(user=org.alice, workload=w)
    part = c.get("/workloads/", HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in part and 'data-live="false"' in part
    assert "nothing listed here can change any more" in part


def test_a_one_day_chart_is_labelled_by_day():
    fig = spend_by_team_figure({"days": [datetime(2026, 12, 2, tzinfo=UTC)],
                                "teams": {"vision": [1.5]}}, "EUR")
    assert fig["layout"]["xaxis"]["type"] == "category"
    assert fig["data"][0]["x"] == ["2026-12-02"]
