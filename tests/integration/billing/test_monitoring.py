"""billing/monitoring.py: spend, budgets and their burn, thresholds reached, the ledger's
length and its last check, as /metrics reports them; the ledger check recorded."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from billing.models import LedgerVerification
from billing.monitoring import billing_families
from billing.services import budget_create, charges_post_hour, ledger_check, usage_rollup_hour
from billing.services.rates import cost_center_create
from billing.tasks import verify_ledger

from .conftest import H

NOW = H + timedelta(hours=3)


def samples(families):
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in families for s in family.samples}


def value(found, name, **labels):
    return found.get((name, frozenset(labels.items())))


def spend(admit, gpus, hour=H):
    admit(gpus=gpus, reserved=hour, running=hour, ended=hour + timedelta(hours=1))
    usage_rollup_hour(hour=hour, now=NOW, telemetry={})
    charges_post_hour(hour=hour, now=NOW)


def test_spend_budgets_and_thresholds(world, admit):
    cost_center_create(code="ops", name="Operations")
    budget_create(cost_center=world["cc"], amount=Decimal("100"),
                  thresholds=[(50, "notify"), (80, "notify"), (100, "block")])
    budget_create(cost_center=world["cc"], amount=Decimal("200"), period="weekly")
    spend(admit, 24)  # 24 GPU-hours x 2.50 = 60.00
    found = samples(billing_families(NOW))
    assert value(found, "allot_spend_month_to_date", cost_center="rd", currency="EUR") == 60
    assert value(found, "allot_spend_month_to_date", cost_center="ops", currency="EUR") == 0
    monthly = {"cost_center": "rd", "period": "monthly"}
    assert value(found, "allot_budget_amount", currency="EUR", **monthly) == 100
    assert value(found, "allot_budget_spent", currency="EUR", **monthly) == 60
    assert value(found, "allot_budget_used_ratio", **monthly) == pytest.approx(0.6)
    assert value(found, "allot_budget_used_ratio", cost_center="rd",
                 period="weekly") == pytest.approx(0.3)
    assert value(found, "allot_budget_threshold_reached", percent="50", action="notify",
                 **monthly) == 1
    assert value(found, "allot_budget_threshold_reached", percent="80", action="notify",
                 **monthly) == 0
    assert value(found, "allot_ledger_entries_total") == 1
    # The ledger grew: the cached sums follow (they are keyed on its length).
    spend(admit, 16, hour=H + timedelta(hours=1))  # +40.00
    found = samples(billing_families(NOW))
    assert value(found, "allot_budget_spent", currency="EUR", **monthly) == 100
    assert value(found, "allot_budget_threshold_reached", percent="100", action="block",
                 **monthly) == 1
    # Spend of last month is not this month's.
    found = samples(billing_families(NOW + timedelta(days=31)))
    assert value(found, "allot_spend_month_to_date", cost_center="rd", currency="EUR") == 0


def test_the_ledger_check_is_recorded_and_reported(world, admit):
    found = samples(billing_families(NOW))
    assert value(found, "allot_ledger_verify_ok") is None  # never checked yet
    spend(admit, 8)
    out = __import__("io").StringIO()
    call_command("billing_verify", stdout=out)
    assert "ledger OK: 1 entries verified" in out.getvalue()
    check = LedgerVerification.objects.get()
    assert check.ok and check.checked == 1 and check.problem == ""
    found = samples(billing_families(NOW))
    assert value(found, "allot_ledger_verify_ok") == 1
    assert value(found, "allot_ledger_verify_checked_entries") == 1
    assert value(found, "allot_ledger_verify_timestamp_seconds") == check.ran_at.timestamp()

    with connection.cursor() as cur:
        cur.execute("UPDATE billing_ledgerentry SET amount = amount - 1 WHERE seq = 1")
    with pytest.raises(CommandError, match=r"first bad entry #1"):
        call_command("billing_verify")
    assert verify_ledger()["ok"] is False  # the daily task records it too
    last = LedgerVerification.objects.order_by("-ran_at", "-id").first()
    assert not last.ok and last.first_bad_seq == 1 and "altered" in last.problem
    assert value(samples(billing_families(NOW)), "allot_ledger_verify_ok") == 0


def test_a_check_names_an_invoice_that_does_not_match(world, admit):
    from datetime import date

    from billing.models import Invoice
    from billing.services import invoice_issue

    spend(admit, 8)
    invoice = invoice_issue(cost_center=world["cc"], month=date(2026, 3, 1),
                            now=H + timedelta(days=40))
    Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("1.00"))
    check = ledger_check()
    assert not check.ok and check.first_bad_seq is None
    assert check.problem.startswith(f"invoice {invoice.number}: total 1.00 EUR")
