"""Hourly rollup and pricing into the ledger: exact values, idempotence, corrections."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Sum

from billing.metering import WorkloadTelemetry
from billing.models import LedgerEntry, UsageRecord
from billing.services import (
    charges_post_hour,
    cost_center_create,
    rate_card_create,
    team_cost_center_set,
    usage_rollup_hour,
)

from .conftest import H, minutes

LATER = H + timedelta(days=2)


def post(hour=H, telemetry=None):
    usage_rollup_hour(hour=hour, now=LATER, telemetry=telemetry or {})
    return charges_post_hour(hour=hour, now=LATER)


def test_frozen_and_running_lines_exact(admit):
    adm = admit(gpus=16, reserved=H + minutes(10), running=H + minutes(15),
                ended=H + minutes(45))
    result = post()
    frozen = UsageRecord.objects.get(admission_id=adm.pk, phase="frozen")
    assert frozen.gpu_hours == Decimal("1.3333")
    lines = {e.kind: e for e in LedgerEntry.objects.all()}
    assert set(lines) == {"gpu_frozen", "gpu_reserved"}
    assert (lines["gpu_frozen"].quantity, lines["gpu_frozen"].rate,
            lines["gpu_frozen"].amount) == (Decimal("1.3333"), Decimal("1.0000"), Decimal("1.33"))
    assert (lines["gpu_reserved"].quantity, lines["gpu_reserved"].amount) == (
        Decimal("8.0000"), Decimal("20.00"))
    assert result.appended == 2
    assert lines["gpu_reserved"].team_name == "vision"
    assert lines["gpu_reserved"].queue == "rd/vision"


def test_rerunning_an_hour_changes_nothing(admit):
    admit(gpus=8, reserved=H, running=H + minutes(2), ended=H + minutes(50))
    post()
    records = list(UsageRecord.objects.values())
    entries = LedgerEntry.objects.count()
    again = post()
    assert again.appended == 0 and again.corrections == 0
    assert list(UsageRecord.objects.values()) == records
    assert LedgerEntry.objects.count() == entries


def test_rate_change_mid_hour(world, admit):
    rate_card_create(flavor=world["a100"], resource="gpu", rate=Decimal("3.10"),
                     effective_from=H + minutes(30))
    admit(gpus=4, reserved=H, running=H, ended=H + timedelta(hours=1))
    post()
    got = [(e.rate_version, e.quantity, e.amount)
           for e in LedgerEntry.objects.filter(kind="gpu_reserved")]
    assert got == [(1, Decimal("2.0000"), Decimal("5.00")), (2, Decimal("2.0000"),
                                                           Decimal("6.20"))]


def test_rate_change_cannot_reach_into_billed_hours(world, admit):
    admit(gpus=1, reserved=H, running=H, ended=H + minutes(30))
    post()
    with pytest.raises(ValidationError, match="already billed"):
        rate_card_create(flavor=world["a100"], resource="gpu", rate=Decimal("9"),
                         effective_from=H + minutes(10))
    before = list(LedgerEntry.objects.values_list("amount", flat=True))
    rate_card_create(flavor=world["a100"], resource="gpu", rate=Decimal("9"),
                     effective_from=H + timedelta(hours=1))
    post()
    assert list(LedgerEntry.objects.values_list("amount", flat=True)) == before


def test_preempted_and_resumed_workload(admit):
    first = admit(gpus=8, reserved=H - minutes(30), running=H - minutes(25),
                  ended=H + minutes(20))
    admit(gpus=8, reserved=H + minutes(35), running=H + minutes(40), ended=H + minutes(55),
          workload=first.workload)
    post()
    q = LedgerEntry.objects.values("kind").annotate(q=Sum("quantity"), a=Sum("amount"))
    got = {r["kind"]: (r["q"], r["a"]) for r in q}
    # running 20 + 15 minutes of 8 GPUs; frozen 5 minutes of the second admission.
    assert got == {
        "gpu_reserved": (Decimal("4.6667"), Decimal("11.67")),
        "gpu_frozen": (Decimal("0.6667"), Decimal("0.67")),
    }
    assert LedgerEntry.objects.values("workload_id").distinct().count() == 1


def test_cpu_only_pods(admit):
    admit(gpus=0, cpu="12", mem="48", flavor="cpu", reserved=H, running=H,
          ended=H + minutes(40))
    post()
    got = {e.kind: (e.quantity, e.unit, e.amount) for e in LedgerEntry.objects.all()}
    assert got == {
        "cpu": (Decimal("8.0000"), "core-hour", Decimal("0.32")),
        "memory": (Decimal("32.0000"), "GiB-hour", Decimal("0.16")),
    }


def test_usage_basis_with_late_telemetry_posts_a_correction(world, admit):
    cc = cost_center_create(code="ml", name="ML", charge_basis="usage")
    team_cost_center_set(team=world["team"], cost_center=cc)
    adm = admit(gpus=8, reserved=H, running=H, ended=H + minutes(30))
    post()  # no telemetry: every minute is a gap, billed as reserved (never as zero)
    (first,) = LedgerEntry.objects.all()
    assert (first.kind, first.quantity, first.amount) == ("gpu_active", Decimal("4.0000"),
                                                          Decimal("10.00"))
    tel = WorkloadTelemetry(source="DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    for m in range(30):
        tel.active[int((H + minutes(m + 1)).timestamp())] = Decimal("2")
    result = post(telemetry={adm.workload_id: tel})
    assert result.corrections == 1 and result.appended == 2
    reversal, new = LedgerEntry.objects.order_by("seq")[1:]
    assert (reversal.amount, reversal.corrects_id) == (Decimal("-10.00"), first.pk)
    assert (new.quantity, new.amount) == (Decimal("1.0000"), Decimal("2.50"))
    assert LedgerEntry.objects.aggregate(t=Sum("amount"))["t"] == Decimal("2.50")
    record = UsageRecord.objects.get(phase="running")
    assert record.efficiency == Decimal("0.2500")


def test_incomplete_hour_is_refused(world):
    with pytest.raises(ValidationError, match="not over yet"):
        usage_rollup_hour(hour=H, now=H + minutes(59))


def test_fractions_are_billed_by_the_fraction(admit):
    # Four pods of a quarter card, each its own workload, running the whole hour: 1 GPU-hour.
    adms = [admit(gpus=Decimal("0.250"), reserved=H - minutes(5), running=H, name=f"nb-{i}")
            for i in range(4)]
    post()
    records = UsageRecord.objects.filter(admission_id__in=[a.pk for a in adms], phase="running")
    assert [r.gpus for r in records] == [Decimal("0.250")] * 4
    assert [r.gpu_hours for r in records] == [Decimal("0.2500")] * 4
    lines = LedgerEntry.objects.filter(kind="gpu_reserved")
    assert lines.aggregate(q=Sum("quantity"))["q"] == Decimal("1.0000")
    # Each line is 0.25 GPU-hour at 2.50: 0.625, rounded to the cent as every line is.
    assert sorted(str(e.amount) for e in lines) == ["0.62"] * 4
