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
