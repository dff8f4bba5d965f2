"""API and pages: values, permissions (researchers see their teams only), schema, downloads."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from billing.metering import hour_floor
from billing.services import (
    budget_create,
    budgets_evaluate,
    charges_post_hour,
    cost_center_create,
    invoice_issue,
    team_cost_center_set,
    usage_rollup_hour,
)
from tests.factories import AdminFactory, TeamFactory, TeamMembershipFactory, UserFactory

from .conftest import minutes

pytestmark = pytest.mark.django_db


@pytest.fixture
def billed(world, admit):
    """Two teams billed last month and this month: vision (rd) and nlp (cost center ml)."""
    now = timezone.now()
    this_month = hour_floor(now).replace(day=1, hour=0)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    nlp = TeamFactory(name="nlp")
    bob = UserFactory(username="bob")
    TeamMembershipFactory(team=nlp, user=bob)
    ml = cost_center_create(code="ml", name="ML")
    team_cost_center_set(team=nlp, cost_center=ml)
    hours = [last_month + timedelta(hours=5), this_month + timedelta(hours=1)]
    if hours[1] + timedelta(hours=1) > now:  # early on the 1st: bill a day of last month
        hours[1] = this_month - timedelta(hours=3)
    for h in hours:
        admit(gpus=8, reserved=h, running=h + minutes(6), ended=h + minutes(60), name="v")
        admit(gpus=4, reserved=h, running=h, ended=h + minutes(30), name="n", team=nlp)
        usage_rollup_hour(hour=h, now=now, telemetry={})
        charges_post_hour(hour=h, now=now)
    return {"nlp": nlp, "bob": bob, "ml": ml, "last_month": last_month, "hours": hours}


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_usage_api_groups_and_restricts_to_the_researchers_teams(world, billed):
    start = billed["last_month"].date().isoformat()
    resp = api(world["user"]).get("/api/v1/usage", {"group_by": "team", "from": start})
    assert resp.status_code == 200, resp.content
    rows = resp.json()["rows"]
    assert [r["key"] for r in rows] == ["vision"]  # not nlp
    (row,) = rows
    # per hour: 8 GPUs 6 min frozen (0.8) and 54 min running (7.2), twice
    assert Decimal(row["reserved_gpu_hours"]) == Decimal("14.4")
    assert Decimal(row["frozen_gpu_hours"]) == Decimal("1.6")
    assert Decimal(row["cost"]) == Decimal("37.60")  # 2 x (18.00 + 0.80)
    assert row["efficiency"] is None  # no telemetry: unknown, not zero
    admin_rows = api(AdminFactory()).get("/api/v1/usage", {"group_by": "queue", "from": start})
    assert [r["key"] for r in admin_rows.json()["rows"]] == ["rd/vision"]
    flav = api(AdminFactory()).get("/api/v1/usage", {"group_by": "flavor", "from": start})
    assert Decimal(flav.json()["rows"][0]["cost"]) == Decimal("37.60") + Decimal("10.00")


def test_usage_api_rejects_bad_input(world):
    client = api(world["user"])
    assert client.get("/api/v1/usage", {"group_by": "colour"}).status_code == 400
    bad = client.get("/api/v1/usage", {"from": "2026-03-02", "to": "2026-03-01"})
    assert bad.status_code == 400 and "must be after" in bad.json()["to"][0]
    # Ten characters that are not a date: a 400 naming the field, not a 500.
    for key in ("from", "to"):
        bad = client.get("/api/v1/usage", {key: "2026-13-45"})
        assert bad.status_code == 400, bad.content
        assert "2026-13-45" in bad.json()[key][0]
    assert APIClient().get("/api/v1/usage").status_code == 401


def test_invoices_api_permissions_and_downloads(world, billed):
    month = billed["last_month"].date()
    admin = AdminFactory()
    resp = api(admin).post("/api/v1/invoices", {"cost_center": "rd",
                                                "month": f"{month:%Y-%m}"}, format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["total"] == "18.80"
    inv_id = resp.json()["id"]
    assert api(world["user"]).get("/api/v1/invoices").json() == []
    assert api(world["user"]).get(f"/api/v1/invoices/{inv_id}").status_code == 404
    assert api(world["user"]).post("/api/v1/invoices", {}).status_code == 403
    lead = UserFactory(username="lead")
    TeamMembershipFactory(team=world["team"], user=lead, role="lead")
    assert [i["id"] for i in api(lead).get("/api/v1/invoices").json()] == [inv_id]
    detail = api(lead).get(f"/api/v1/invoices/{inv_id}").json()
    assert detail["total"] == "18.80" and len(detail["workloads"]) == 1
    csv_resp = api(lead).get(f"/api/v1/invoices/{inv_id}", {"download": "csv"})
    assert csv_resp["Content-Type"].startswith("text/csv")
    assert "total,,,,,,,,18.80" in csv_resp.content.decode()
    bob_lead = billed["bob"]
    assert api(bob_lead).get(f"/api/v1/invoices/{inv_id}").status_code == 404
    dup = api(admin).post("/api/v1/invoices", {"cost_center": "rd", "month": f"{month:%Y-%m}"},
                          format="json")
    assert dup.status_code == 400 and "already invoiced" in dup.json()["detail"]


def test_budgets_and_rates_api(world, billed):
    admin = AdminFactory()
    resp = api(admin).post("/api/v1/budgets", {
        "cost_center": "rd", "amount": "10.00",
        "thresholds": [{"percent": 50, "action": "notify"}, {"percent": 100, "action": "block"}],
    }, format="json")
    assert resp.status_code == 201, resp.content
    budgets_evaluate()
    mine = api(world["user"]).get("/api/v1/budgets").json()
    assert len(mine) == 1 and mine[0]["cost_center"] == "rd"
    this_month = billed["hours"][1] >= hour_floor(timezone.now()).replace(day=1, hour=0)
    assert mine[0]["spent"] == ("18.80" if this_month else "0.00")
    assert [t["fired"] for t in mine[0]["thresholds"]] == [this_month, this_month]
    assert api(billed["bob"]).get("/api/v1/budgets").json() == []
    rates = api(world["user"]).get("/api/v1/rates").json()
    assert {(r["flavor"], r["resource"], r["rate"], r["frozen_rate"]) for r in rates} >= {
        ("a100", "gpu", "2.5000", "1.0000")}
    bad = api(admin).post("/api/v1/rates", {
        "flavor": "a100", "resource": "gpu", "rate": "3", "effective_from":
        billed["hours"][0].isoformat()}, format="json")
    assert bad.status_code == 400 and "already billed" in bad.json()["effective_from"][0]
    assert api(world["user"]).post("/api/v1/rates", {}).status_code == 403


def test_schema_lists_billing_endpoints(world):
    resp = api(world["user"]).get("/api/schema/", {"format": "json"})
    paths = json.loads(resp.content)["paths"]
    for p in ("/api/v1/usage", "/api/v1/invoices", "/api/v1/invoices/{id}", "/api/v1/budgets",
              "/api/v1/rates"):
        assert p in paths


def test_pages_render_with_numbers_and_permissions(client, world, billed):
    client.force_login(world["user"])
    page = client.get(reverse("billing-overview"),
                      {"from": billed["last_month"].date().isoformat()})
    assert page.status_code == 200
    text = page.content.decode()
    assert "37.60 EUR" in text and "nlp" not in text and "chart-spend-data" in text
    assert client.get(reverse("billing-reconciliation")).status_code == 404
    invoice = invoice_issue(cost_center=world["cc"], month=billed["last_month"].date())
    assert client.get(reverse("billing-invoice", args=[invoice.pk])).status_code == 404
    client.force_login(AdminFactory())
    detail = client.get(reverse("billing-invoice", args=[invoice.pk]))
    assert "18.80 EUR" in detail.content.decode()
    dl = client.get(reverse("billing-invoice-download", args=[invoice.pk, "json"]))
    assert json.loads(dl.content)["total"] == "18.80"
    assert client.get(reverse("billing-reconciliation")).status_code == 200
    rates = client.get(reverse("billing-rates")).content.decode()
    assert "2.5000 EUR/GPU-hour" in rates and "1.0000 EUR/GPU-hour" in rates


def test_workload_cost_and_team_month_to_date(world, billed, admit):
    from billing import selectors

    wl = admit(gpus=2, reserved=billed["hours"][1], running=billed["hours"][1],
               ended=billed["hours"][1] + minutes(30), name="small").workload
    usage_rollup_hour(hour=billed["hours"][1], telemetry={})
    charges_post_hour(hour=billed["hours"][1])
    cost = selectors.workload_cost(wl)
    assert cost["so_far"] == Decimal("2.50") and cost["reserved_gpu_hours"] == Decimal("1")
    mtd = selectors.team_month_to_date(world["team"])
    assert mtd["spent"] >= Decimal("2.50") and mtd["cost_center"] == "rd"


@override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend")
def test_banner_for_blocked_team(world, billed):
    from billing import selectors

    budget_create(cost_center=world["cc"], amount=Decimal("1"), period="monthly",
                  thresholds=[(100, "block")])
    budgets_evaluate()
    banner = selectors.budget_banner(world["user"])
    if billed["hours"][1] < hour_floor(timezone.now()).replace(day=1, hour=0):
        assert banner is None  # only last month was billed: nothing this month
    else:
        assert banner["level"] == "danger" and "100% threshold" in banner["message"]
    assert selectors.budget_banner(billed["bob"]) is None


def test_workload_cost_page_and_api_for_its_team_only(client, world, billed):
    from scheduling.models import Workload

    mine = Workload.objects.filter(team=world["team"]).first()
    theirs = Workload.objects.filter(team=billed["nlp"]).first()
    Workload.objects.filter(team=billed["nlp"]).update(owner=billed["bob"])
    resp = api(world["user"]).get(f"/api/v1/usage/workloads/{mine.pk}")
    assert resp.status_code == 200
    body = resp.json()
    # one of the two "v" workloads: 0.8 frozen GPU-h @1.00 + 7.2 running @2.50
    assert (body["so_far"], body["frozen_gpu_hours"], body["reserved_gpu_hours"]) == (
        "18.80", "0.8000", "7.2000")
    assert body["efficiency"] is None and body["active_gpu_hours"] is None
    assert api(world["user"]).get(f"/api/v1/usage/workloads/{theirs.pk}").status_code == 404
    client.force_login(world["user"])
    page = client.get(reverse("billing-workload", args=[mine.pk]))
    text = page.content.decode()
    assert page.status_code == 200 and "18.80 EUR" in text and "no telemetry" in text
    assert "GPU-hours frozen" in text
    assert client.get(reverse("billing-workload", args=[theirs.pk])).status_code == 404


def test_usage_api_names_the_bad_date_and_its_value(world):
    client = api(world["user"])
    bad = client.get("/api/v1/usage", {"from": "2026-02-30"})
    assert bad.status_code == 400
    assert bad.json() == {"from": ["'2026-02-30' is not a date (YYYY-MM-DD)"]}
    bad = client.get("/api/v1/usage", {"from": "0000-01-01", "to": "yesterday"})
    assert bad.status_code == 400
    assert bad.json()["from"] == ["'0000-01-01' is not a date (YYYY-MM-DD)"]
    assert bad.json()["to"][0].startswith("'yesterday': Datetime has wrong format")
    bad = client.get("/api/v1/usage", {"to": "9999-12-31"})
    assert bad.json() == {"to": ["9999-12-31 is out of range: a date from 1970-01-01 to "
                                 "9998-12-31"]}
    assert client.get("/api/v1/usage", {"from": "2026-02-28", "to": "2026-03-01"}).json()[
        "from"] == "2026-02-28T00:00:00Z"


def test_invoice_month_must_be_a_month(world):
    admin = api(AdminFactory())
    for month, message in (
        ("2026-13", "'2026-13' is not a month (YYYY-MM, MM from 01 to 12)"),
        ("2026-00", "'2026-00' is not a month (YYYY-MM, MM from 01 to 12)"),
        ("26-1", "'26-1' is not a month (YYYY-MM, MM from 01 to 12)"),
        ("0000-01", "0000-01 is out of range: a month from 1970-01 to 9998-12"),
        ("9999-12", "9999-12 is out of range: a month from 1970-01 to 9998-12"),
    ):
        resp = admin.post("/api/v1/invoices", {"cost_center": "rd", "month": month},
                          format="json")
        assert resp.status_code == 400, month
        assert resp.json() == {"month": [message]}
    resp = admin.post("/api/v1/invoices", {"cost_center": "rd", "month": "9998-12"},
                      format="json")
    assert resp.status_code == 400 and "is not over yet" in resp.json()["detail"]


def test_a_second_budget_for_a_period_is_a_400_naming_the_first(world):
    admin = api(AdminFactory())
    first = admin.post("/api/v1/budgets", {"cost_center": "rd", "amount": "10.00"},
                       format="json")
    assert first.status_code == 201
    dup = admin.post("/api/v1/budgets", {"cost_center": "rd", "amount": "20.00"},
                     format="json")
    assert dup.status_code == 400
    assert dup.json() == {"period": [
        f"cost center rd already has a monthly budget (#{first.json()['id']}, 10.00 EUR): "
        "one per cost center and period"]}
    twice = admin.post("/api/v1/budgets", {
        "cost_center": "rd", "period": "weekly", "amount": "5",
        "thresholds": [{"percent": 80, "action": "notify"}, {"percent": 80, "action": "notify"}],
    }, format="json")
    assert twice.status_code == 400
    assert twice.json() == {"thresholds": ["80% notify is listed twice"]}
    assert [b["period"] for b in admin.get("/api/v1/budgets").json()] == ["monthly"]


@pytest.mark.parametrize("params, error", [
    ({"to": "9999-12-31"}, "to: 9999-12-31 is out of range: a date from 1970-01-01 to "
                           "9998-12-31"),
    ({"from": "2026-02-30"}, "from: &#x27;2026-02-30&#x27; is not a date (YYYY-MM-DD)"),
])
def test_cost_page_shows_a_bad_date_as_a_400(client, world, params, error):
    client.force_login(world["user"])
    page = client.get(reverse("billing-overview"), params)
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert error in page.content.decode()


def test_reconciliation_page_shows_a_bad_day_as_a_400(client, world):
    client.force_login(AdminFactory())
    page = client.get(reverse("billing-reconciliation"), {"day": "2026-13-01"})
    assert page.status_code == 400
    assert "day: &#x27;2026-13-01&#x27; is not a date (YYYY-MM-DD)" in page.content.decode()


def _csv_rows(response):
    import csv
    import io

    assert response["Content-Type"].startswith("text/csv") and response.streaming
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_cost_overview_sorts_its_usage_table_and_exports_it_as_csv(client, world, billed):
    client.force_login(AdminFactory())
    since = {"from": billed["last_month"].date().isoformat()}
    url = reverse("billing-overview")

    def teams(html):
        import re

        return re.findall(r'<tr class="usage-row" data-key="([^"]*)">', html)

    assert teams(client.get(url, since).content.decode()) == ["nlp", "vision"]
    page = client.get(url, {**since, "sort": "-cost"}).content.decode()
    assert teams(page) == ["vision", "nlp"]
    assert 'aria-sort="descending" scope="col"><a class="sort"' in page and "csv-link" in page
    rows = _csv_rows(client.get(url, {**since, "sort": "-cost", "format": "csv"}))
    assert rows[0] == ["team", "reserved_gpu_hours", "frozen_gpu_hours", "active_gpu_hours",
                       "efficiency", "gap_gpu_hours", "core_hours", "billed", "provisional",
                       "cost", "currency"]
    body = {r[0]: r for r in rows[1:]}
    assert list(body) == ["vision", "nlp"]
    assert body["vision"][rows[0].index("cost")] == "37.60"
    assert body["nlp"][rows[0].index("cost")] == "10.00"
    assert body["vision"][rows[0].index("billed")] == "37.60"
    assert body["vision"][rows[0].index("currency")] == "EUR"
    # The same figures as the page and the API.
    api_rows = api(AdminFactory()).get("/api/v1/usage", {**since, "group_by": "team"}).json()
    assert {r["key"]: r["cost"] for r in api_rows["rows"]} == {
        k: v[rows[0].index("cost")] for k, v in body.items()}
    bad = client.get(url, {"sort": "owner"})
    assert bad.status_code == 400 and "sort: &#x27;owner&#x27; is not a column" in (
        bad.content.decode())
    assert client.get(url, {"sort": "owner", "format": "csv"})["Content-Type"].startswith(
        "text/html")
