"""MIG slices billed by the fraction (QUOTA-SEMANTICS.md §10): as GPU-hours at the flavor's
GPU rate, each slice worth its GPU-equivalent (the flavor's, else N/7 for `mig-Ng.*`)."""

from decimal import Decimal

import pytest

from billing.models import LedgerEntry, UsageRecord
from billing.services import charges_post_hour, rate_card_create, usage_rollup_hour
from quotas.models import Flavor
from scheduling.models import PodSet

from .conftest import T0, H, minutes

pytestmark = pytest.mark.django_db
LATER = H + minutes(2 * 24 * 60)


@pytest.mark.parametrize(("equivalents", "gpu_hours", "amount"), [
    ({}, Decimal("1.0000"), Decimal("3.00")),  # 7 x 1g slices at 1/7: one card
    ({"nvidia.com/mig-1g.10gb": 0.125}, Decimal("0.8750"), Decimal("2.62")),  # 2.625, half to even
])
def test_slices_are_billed_as_gpu_equivalents(world, admit, equivalents, gpu_hours, amount):
    mig = Flavor.objects.create(name="a100-mig", gpu_memory_gib=80, gpu_equivalents=equivalents)
    world["a100-mig"] = mig
    rate_card_create(flavor=mig, resource="gpu", rate=Decimal("3.00"), effective_from=T0)
    adm = admit(gpus=0, reserved=H, running=H, ended=H + minutes(60), flavor="a100-mig")
    PodSet.objects.create(workload=adm.workload, index=0, count=7, flavors=["a100-mig"],
                          gpus=0, resources={"nvidia.com/mig-1g.10gb": 1000})
    usage_rollup_hour(hour=H, now=LATER, telemetry={})
    charges_post_hour(hour=H, now=LATER)
    record = UsageRecord.objects.get(admission_id=adm.pk, phase="running")
    assert record.gpu_hours == gpu_hours
    line = LedgerEntry.objects.get(kind="gpu_reserved")
    assert (line.quantity, line.amount) == (gpu_hours, amount)


def test_the_live_cost_and_estimate_count_slices_as_the_rollup_bills_them(world, admit):
    """Before the hourly rollup, the workload's metered-so-far cost, its cost per hour and its
    estimate count 7 x 1g slices as one card at the GPU rate (they counted nothing); after the
    rollup the billed amount is the same."""
    from billing import selectors

    mig = Flavor.objects.create(name="a100-mig", gpu_memory_gib=80)
    world["a100-mig"] = mig
    rate_card_create(flavor=mig, resource="gpu", rate=Decimal("3.00"), effective_from=T0)
    adm = admit(gpus=0, reserved=H, running=H, flavor="a100-mig")
    PodSet.objects.create(workload=adm.workload, index=0, count=7, flavors=["a100-mig"],
                          gpus=0, resources={"nvidia.com/mig-1g.10gb": 1000})
    now = H + minutes(60)
    cost = selectors.workload_cost(adm.workload, now=now)
    assert cost["unbilled"] == Decimal("3.00")  # 1 card-hour at 3.00
    assert cost["per_hour"] == Decimal("3.00")
    # The 4 h hint: 3 h more at 3.00/h.
    assert cost["estimate_total"] == Decimal("12.00")
    usage_rollup_hour(hour=H, now=now, telemetry={})
    charges_post_hour(hour=H, now=now)
    after = selectors.workload_cost(adm.workload, now=now)
    assert (after["billed"], after["unbilled"]) == (Decimal("3.00"), Decimal("0.00"))


SLICE = "nvidia.com/mig-1g.10gb"


def test_a_profile_and_a_fraction_rate_override_the_gpu_equivalent_in_ledger_invoice_and_live_cost(
        world, admit):
    """A flavor prices `nvidia.com/mig-1g.10gb` at 0.50 per slice-hour and fractions of a card
    at 4.00 per GPU-hour: a workload with 7 slices and 2 pods of a quarter card is billed
    3.50 + 2.00 for its hour (not 2 cards x 3.00); the invoice names both lines with their
    resource; the live cost and the estimate price it the same way."""
    from datetime import date

    from billing import selectors
    from billing.services import invoice_issue
    from billing.services.invoices import invoice_as_dict

    mig = Flavor.objects.create(name="a100-mig", gpu_memory_gib=80)
    world["a100-mig"] = mig
    rate_card_create(flavor=mig, resource="gpu", rate=Decimal("3.00"), effective_from=T0)
    slice_rate = rate_card_create(flavor=mig, resource=SLICE, rate=Decimal("0.50"),
                                  effective_from=T0)
    assert (slice_rate.unit, slice_rate.resource_label) == ("slice-hour", SLICE)
    rate_card_create(flavor=mig, resource="gpu-fraction", rate=Decimal("4.00"),
                     effective_from=T0)
    adm = admit(gpus=Decimal("0.5"), reserved=H, running=H, flavor="a100-mig")
    PodSet.objects.create(workload=adm.workload, index=0, count=7, flavors=["a100-mig"],
                          gpus=0, resources={SLICE: 1000})
    PodSet.objects.create(workload=adm.workload, index=1, count=2, flavors=["a100-mig"],
                          gpus=Decimal("0.25"))
    now = H + minutes(60)
    cost = selectors.workload_cost(adm.workload, now=now)
    assert (cost["per_hour"], cost["unbilled"]) == (Decimal("5.50"), Decimal("5.50"))
    # The request form's estimate for the same pods.
    from billing.selectors.rates import request_cost_estimate

    estimate = request_cost_estimate("a100-mig", [
        {"count": 7, "gpus": 0, "resources": {SLICE: 1000}},
        {"count": 2, "gpus": "0.25"}], now)
    assert (estimate.per_hour, estimate.cards) == (Decimal("5.50"), Decimal("1.500"))
    usage_rollup_hour(hour=H, now=LATER, telemetry={})
    charges_post_hour(hour=H, now=LATER)
    record = UsageRecord.objects.get(admission_id=adm.pk)
    assert (record.fraction_gpus, record.slices) == (Decimal("0.500"), {SLICE: ["7", "1.000000"]})
    assert record.gpu_hours == Decimal("1.5000")  # GPU-hours still count every card
    lines = {(e.unit, e.quantity, e.amount) for e in LedgerEntry.objects.all()}
    assert lines == {("slice-hour", Decimal("7.0000"), Decimal("3.50")),
                     ("GPU-hour", Decimal("0.5000"), Decimal("2.00"))}
    # The cost charts read the ledger: the day's spend is the overridden price.
    from billing.selectors.series import spend_by_team_daily

    spend = spend_by_team_daily(user=world["user"], start=T0, end=LATER)
    assert spend["teams"] == {"vision": [5.5]}
    invoice = invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1),
                            now=LATER + minutes(40 * 24 * 60))
    assert invoice.total == Decimal("5.50")
    body = invoice_as_dict(invoice)
    assert {(ln["resource"], ln["unit"], ln["amount"]) for ln in body["lines"]} == {
        (SLICE, "slice-hour", "3.50"), ("gpu-fraction", "GPU-hour", "2.00")}
    # Only GPU-hour lines count as the workload's GPU-hours on the appendix.
    assert body["workloads"][0]["gpu_hours"] == "0.5000"


@pytest.mark.parametrize(("resource", "rate", "field", "words"), [
    ("nvidia.com/mig-9x.1gb", "1", "resource",
     "unknown resource 'nvidia.com/mig-9x.1gb' for flavor a100: expected gpu, cpu, memory, "
     "gpu-fraction or a MIG profile"),
    ("example.com/fpga", "1", "resource", "unknown resource 'example.com/fpga'"),
    (SLICE, "-0.5", "rate", "must be 0 or more (got -0.5 EUR per slice-hour)"),
    ("gpu-fraction", "-1", "rate", "must be 0 or more (got -1 EUR per GPU-hour)"),
])
def test_the_rates_api_refuses_unknown_resources_and_negative_prices(world, resource, rate,
                                                                      field, words):
    from rest_framework.test import APIClient

    from billing.models import RateCard
    from tests.factories import AdminFactory

    client = APIClient()
    client.force_authenticate(AdminFactory())
    before = RateCard.objects.count()
    resp = client.post("/api/v1/rates", {"flavor": "a100", "resource": resource, "rate": rate,
                                         "effective_from": "2026-06-01T00:00:00Z"},
                       format="json")
    assert resp.status_code == 400, resp.content
    assert words in resp.json()[field][0]
    assert RateCard.objects.count() == before  # nothing half-saved
    ok = client.post("/api/v1/rates", {"flavor": "a100", "resource": SLICE, "rate": "0.40",
                                       "effective_from": "2026-06-01T00:00:00Z"}, format="json")
    assert ok.status_code == 201, ok.content
    assert (ok.json()["resource"], ok.json()["unit"]) == (SLICE, "slice-hour")
