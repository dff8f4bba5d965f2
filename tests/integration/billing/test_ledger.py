"""The chained ledger: append-only, verification, tampering named by billing_verify."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from billing.models import LedgerEntry
from billing.services import charges_post_hour, ledger_verify, usage_rollup_hour

from .conftest import H, minutes


@pytest.fixture(params=["sql", "python"])
def method(request):
    """Both verifiers: PostgreSQL recomputing the hashes, and Python walking the chain."""
    return request.param


@pytest.fixture
def ledger(admit):
    for i in range(3):
        admit(gpus=8, reserved=H + minutes(i), running=H + minutes(5 + i),
              ended=H + minutes(40), name=f"w{i}")
    usage_rollup_hour(hour=H, now=H + timedelta(days=1), telemetry={})
    charges_post_hour(hour=H, now=H + timedelta(days=1))
    assert LedgerEntry.objects.count() == 6
    return list(LedgerEntry.objects.order_by("seq"))


def test_chain_links_each_entry_to_the_previous(ledger, method):
    assert ledger[0].prev_hash == "0" * 64
    for prev, entry in zip(ledger, ledger[1:], strict=False):
        assert entry.prev_hash == prev.hash and entry.seq == prev.seq + 1
    assert ledger_verify(method=method).ok and ledger_verify(method=method).checked == 6
    out = __import__("io").StringIO()
    call_command("billing_verify", stdout=out)
    assert "ledger OK: 6 entries" in out.getvalue()


def test_entries_cannot_be_edited_through_the_orm(ledger):
    entry = ledger[2]
    entry.amount = Decimal("0.01")
    with pytest.raises(ValueError, match="append-only"):
        entry.save()


def test_tampered_amount_is_named(ledger, method):
    with connection.cursor() as cur:
        cur.execute("UPDATE billing_ledgerentry SET amount = amount - 1 WHERE seq = 4")
    result = ledger_verify(method=method)
    assert not result.ok and result.first_bad_seq == 4
    assert "altered" in result.problem
    with pytest.raises(CommandError, match=r"first bad entry #4"):
        call_command("billing_verify")


def test_rehashed_tampering_breaks_the_next_link(ledger, method):
    with connection.cursor() as cur:
        cur.execute("UPDATE billing_ledgerentry SET hash = %s WHERE seq = 2", ["f" * 64])
    result = ledger_verify(method=method)
    assert result.first_bad_seq == 2


def test_deleted_entries_are_found(ledger, method):
    with connection.cursor() as cur:
        cur.execute("DELETE FROM billing_ledgerentry WHERE seq = 3")
    result = ledger_verify(method=method)
    assert (result.ok, result.first_bad_seq) == (False, 4)
    assert "#3..#3 are missing" in result.problem
    with connection.cursor() as cur:
        cur.execute("DELETE FROM billing_ledgerentry WHERE seq >= 3")
    result = ledger_verify(method=method)
    assert (result.ok, result.first_bad_seq) == (False, 3)
    assert "removed from the end" in result.problem
