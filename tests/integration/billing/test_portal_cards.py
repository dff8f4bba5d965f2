"""Cost on the portal's pages: the workload page, the dashboard, and the nav links."""

from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import selectors
from billing.metering import hour_floor
from billing.selectors import budgets, series, workloads
from billing.services import charges_post_hour, usage_rollup_hour
from tests.factories import AdminFactory

from .conftest import minutes


@pytest.fixture
def running(world, admit, monkeypatch):
    """8 × a100 reserved at h, running from h+6 min, 4 h hint; hour h billed; clock at h+2.5 h."""
    real_now = timezone.now()
    h = hour_floor(real_now) - timedelta(hours=3)
    adm = admit(gpus=8, reserved=h, running=h + minutes(6), name="resnet")
    usage_rollup_hour(hour=h, now=real_now, telemetry={})
    charges_post_hour(hour=h, now=real_now)
    clock = h + timedelta(hours=2, minutes=30)
    for module in (budgets, series, workloads):  # the selectors that read the clock
        monkeypatch.setattr(module, "timezone", SimpleNamespace(now=lambda: clock))
    return {"workload": adm.workload, "h": h}


def test_workload_page_shows_cost_so_far_and_estimated_total(client, world, running):
    client.force_login(world["user"])
    page = client.get(reverse("workload-detail", args=[running["workload"].pk]))
    assert page.status_code == 200
    text = page.content.decode()
    # Hour h billed: 0.8 frozen GPU-h @ 1.00 + 7.2 running GPU-h @ 2.50 = 18.80; then 1.5 h
    # unbilled at 8 × 2.50 = 20.00/h = 30.00. So far 48.80.
    assert '<strong class="cost-so-far">48.80 EUR</strong>' in text
    assert "18.80 billed + 30.00 metered so far, provisional until the hourly rollup" in text
    # Held 2.5 h of its 4 h hint: 1.5 h more at 20.00/h = 30.00 → 78.80 in all.
    assert "78.80 EUR" in text and "(1.50 h more at 20.00 EUR/h)" in text
    assert "7.2000 running + 0.8000 frozen" in text
    assert reverse("billing-workload", args=[running["workload"].pk]) in text


def test_dashboard_shows_the_teams_month_to_date(client, world, running):
    client.force_login(world["user"])
    for url in ("/", reverse("dashboard")):
        text = client.get(url).content.decode()
        if running["h"] >= hour_floor(timezone.now()).replace(day=1, hour=0):
            # hour h billed (18.80), then 1.5 h running not rolled up yet: 30.00 provisional
            assert ('<strong class="mtd-spent">48.80 EUR</strong> spent · 19.20 GPU-hours · '
                    "0.80 EUR frozen") in text
            assert "18.80 billed + 30.00 metered so far (provisional" in text
        else:  # the first hours of a month: hour h was last month
            assert '<strong class="mtd-spent">' in text and "metered so far" in text
        assert "vision: " in text and " to date</h2>" in text
    # The 10 s htmx refresh carries the queue standing only, not the cost cards.
    partial = client.get(reverse("dashboard"), HTTP_HX_REQUEST="true").content.decode()
    assert "to date</h2>" not in partial and "<html" not in partial


def test_dashboard_without_a_team_has_no_cost_card(client, world):
    client.force_login(AdminFactory())
    text = client.get("/").content.decode()
    assert "to date</h2>" not in text


def test_nav_costs_for_everyone_policies_for_admins(client, world):
    client.force_login(world["user"])
    text = client.get("/").content.decode()
    assert f'<a href="{reverse("billing-overview")}">Costs</a>' in text
    assert ">Policies</a>" not in text
    client.force_login(AdminFactory())
    text = client.get(reverse("billing-overview")).content.decode()
    assert f'<a href="{reverse("billing-overview")}" aria-current="page">Costs</a>' in text
    assert f'<a href="{reverse("policy-list")}">Policies</a>' in text


def test_estimate_counts_unbilled_hours_once(world, running):
    cost = selectors.workload_cost(running["workload"])
    assert (cost["so_far"], cost["estimate_total"]) == (Decimal("48.80"), Decimal("78.80"))
    assert cost["remaining_hours"] == Decimal("1.5")


def test_a_finished_workload_keeps_its_cost_until_the_rollup(world, admit):
    real_now = timezone.now()
    h = hour_floor(real_now) - timedelta(hours=2)
    # 8 GPUs reserved at h, running from h+6 min, ended at h+30 min
    adm = admit(gpus=8, reserved=h, running=h + minutes(6), ended=h + minutes(30))
    before = selectors.workload_cost(adm.workload, now=real_now)
    # 0.1 h frozen × 8 × 1.00 + 0.4 h running × 8 × 2.50 = 0.80 + 8.00
    assert (before["so_far"], before["billed"], before["unbilled"]) == (
        Decimal("8.80"), Decimal("0.00"), Decimal("8.80"))
    assert before["provisional"] is True
    mtd = selectors.team_month_to_date(world["team"], now=real_now)
    if h >= hour_floor(real_now).replace(day=1, hour=0):
        assert (mtd["spent"], mtd["provisional"]) == (Decimal("8.80"), Decimal("8.80"))
    usage_rollup_hour(hour=h, now=real_now, telemetry={})
    charges_post_hour(hour=h, now=real_now)
    after = selectors.workload_cost(adm.workload, now=real_now)
    assert (after["so_far"], after["billed"], after["unbilled"]) == (
        Decimal("8.80"), Decimal("8.80"), Decimal("0.00"))
    assert after["provisional"] is False
    mtd = selectors.team_month_to_date(world["team"], now=real_now)
    if h >= hour_floor(real_now).replace(day=1, hour=0):
        assert (mtd["spent"], mtd["billed"], mtd["provisional"]) == (
            Decimal("8.80"), Decimal("8.80"), Decimal("0.00"))


def test_a_budget_reads_the_same_spent_on_every_page_and_the_api(client, world, running,
                                                                  monkeypatch):
    """A budget's spent is billed + provisional (`cost_center_spend`): the budget table, the
    dashboard's card, the API and the banner read the same figure as the month to date, and
    thresholds fire on it before the rollup (docs/api.md, "Budgets")."""
    import re

    from billing import api as billing_api
    from billing import views as billing_views
    from billing.services import budget_create, budgets_evaluate
    from tests.integration.portal.conftest import api_for

    clock = running["h"] + timedelta(hours=2, minutes=30)
    for module in (billing_api, billing_views):
        monkeypatch.setattr(module, "timezone", SimpleNamespace(now=lambda: clock))
    budget = budget_create(cost_center=world["cc"], amount=Decimal("100"),
                           thresholds=[(40, "notify"), (100, "block")])
    in_month = running["h"] >= clock.replace(day=1, hour=0, minute=0)
    status = selectors.budget_status(budget, clock)
    mtd = selectors.team_month_to_date(world["team"], now=clock)
    assert status["spent"] == status["billed"] + status["provisional"] == mtd["spent"]
    if in_month:  # hour h billed 18.80, then 1.5 h not rolled up: 30.00 provisional
        assert (status["spent"], status["billed"], status["provisional"]) == (
            Decimal("48.80"), Decimal("18.80"), Decimal("30.00"))
        fired = budgets_evaluate(now=clock)
        assert [f.threshold.percent for f in fired] == [40] and fired[0].spent == Decimal("48.80")
        assert ("spent 48.80 of 100.00 EUR this month (48.8%, of which 30.00 EUR metered since "
                "the last hourly rollup (provisional)), reaching the 40% threshold") in (
            fired[0].message)
    admin = AdminFactory()
    (row,) = api_for(admin).get("/api/v1/budgets").json()
    assert (Decimal(row["spent"]), Decimal(row["billed"]), Decimal(row["provisional"])) == (
        status["spent"], status["billed"], status["provisional"])
    client.force_login(admin)
    overview = client.get(reverse("billing-overview")).content.decode()
    assert f'<strong class="budget-spent">{status["spent"]} EUR</strong>' in overview
    if status["provisional"]:
        assert (f'{status["billed"]} billed + {status["provisional"]} metered so far '
                "(provisional)") in overview
    client.force_login(world["user"])
    dashboard = client.get(reverse("dashboard")).content.decode()
    assert re.findall(r'class="budget-spent">([\d.]+)<', dashboard) == [str(status["spent"])]
    assert re.findall(r'class="mtd-spent">([\d.]+) EUR<', dashboard) == [str(mtd["spent"])]
    if in_month:
        assert "spent 48.80 of 100.00 EUR this month (48.8%, of which 30.00 EUR" in dashboard
