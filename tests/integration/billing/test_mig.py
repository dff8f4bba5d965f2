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
