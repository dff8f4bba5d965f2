"""Monthly invoices: lines per team/queue/flavor, appendix, totals equal the ledger's sums."""

import csv
import io
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Sum

from billing.models import LedgerEntry
from billing.services import charges_post_hour, invoice_issue, usage_rollup_hour
from billing.services.invoices import invoice_as_csv, invoice_as_dict, invoice_ledger_total
from tests.factories import TeamFactory

from .conftest import H, minutes

APRIL = H.replace(month=4, day=1)


def bill(hours):
    for hour in hours:
        usage_rollup_hour(hour=hour, now=APRIL, telemetry={})
        charges_post_hour(hour=hour, now=APRIL)


def test_invoice_totals_equal_ledger_sums(world, admit):
    other = TeamFactory(name="nlp")  # no cost center of its own: not on rd's invoice
    admit(gpus=8, reserved=H, running=H + minutes(5), ended=H + timedelta(hours=2), name="a")
    admit(gpus=2, reserved=H + minutes(30), running=H + minutes(30),
          ended=H + minutes(90), name="b")
    admit(gpus=0, cpu="10", flavor="cpu", reserved=H, running=H, ended=H + minutes(30),
          name="c")
    admit(gpus=4, reserved=H, running=H, ended=H + minutes(30), name="d", team=other)
    bill([H, H + timedelta(hours=1)])
    invoice = invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1), now=APRIL)
    ledger_total = LedgerEntry.objects.filter(cost_center=world["cc"]).aggregate(
        t=Sum("amount"))["t"]
    assert invoice.total == ledger_total == invoice_ledger_total(invoice)
    # 8 GPUs: 5 min frozen @1.00 + 115 min @2.50; 2 GPUs 60 min @2.50; 10 cores 30 min @0.04
    assert invoice.total == Decimal("0.67") + Decimal("38.33") + Decimal("5.00") + \
        Decimal("0.20")
    assert sum(ln.amount for ln in invoice.lines.all()) == invoice.total
    assert sum(w.amount for w in invoice.workload_lines.all()) == invoice.total
    kinds = {(ln.team_name, ln.flavor, ln.kind): ln.quantity for ln in invoice.lines.all()}
    assert kinds == {
        ("vision", "a100", "gpu_frozen"): Decimal("0.6667"),
        ("vision", "a100", "gpu_reserved"): Decimal("17.3333"),
        ("vision", "cpu", "cpu"): Decimal("5.0000"),
    }
    data = invoice_as_dict(invoice)
    assert data["total"] == str(invoice.total) and len(data["workloads"]) == 3
    rows = list(csv.reader(io.StringIO(invoice_as_csv(invoice))))
    assert ["total", "", "", "", "", "", "", "", str(invoice.total)] in rows
    with pytest.raises(ValidationError, match="already invoiced"):
        invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1), now=APRIL)


def test_unfinished_month_cannot_be_invoiced(world):
    with pytest.raises(ValidationError, match="not over yet"):
        invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1), now=H)


def test_late_correction_is_carried_by_the_next_invoice(world, admit):
    from scheduling.models import Admission

    may = H.replace(month=5, day=1)
    adm = admit(gpus=8, reserved=H, running=H, ended=H + minutes(30), name="late")
    bill([H])
    march = invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1), now=may)
    assert march.total == Decimal("10.00")
    # The pods' end was synced late: the hour really held 45 minutes.
    Admission.objects.filter(pk=adm.pk).update(ended_at=H + minutes(45))
    april_hour = H.replace(month=4, day=2)
    admit(gpus=1, reserved=april_hour, running=april_hour, ended=april_hour + minutes(60),
          name="april")
    for hour in (H, april_hour):
        usage_rollup_hour(hour=hour, now=may, telemetry={})
        charges_post_hour(hour=hour, now=may)
    april = invoice_issue(cost_center=world["cc"], month=date(2026, 4, 1), now=may)
    lines = {(ln.adjusts, ln.kind): ln.amount for ln in april.lines.all()}
    assert lines == {("", "gpu_reserved"): Decimal("2.50"),
                     ("2026-03", "gpu_reserved"): Decimal("5.00")}  # -10.00 + 15.00
    assert april.total == Decimal("7.50") == invoice_ledger_total(april)
    march.refresh_from_db()
    assert march.total == Decimal("10.00") == invoice_ledger_total(march)
    all_ledger = LedgerEntry.objects.aggregate(t=Sum("amount"))["t"]
    assert march.total + april.total == all_ledger


def test_billing_verify_checks_invoice_totals(world, admit):
    from django.core.management import CommandError, call_command

    from billing.models import Invoice

    admit(gpus=8, reserved=H, running=H, ended=H + minutes(30))
    bill([H])
    invoice = invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1), now=APRIL)
    out = io.StringIO()
    call_command("billing_verify", stdout=out)
    assert "1 invoice totals match the ledger" in out.getvalue()
    Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("9.00"))
    with pytest.raises(CommandError, match=r"INV-202603-rd: total 9.00 EUR but .* sum to 10.00"):
        call_command("billing_verify", "--python")
