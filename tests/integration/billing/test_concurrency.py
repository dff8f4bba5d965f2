"""Two workers pricing the same hour at once append its charges once (the ledger head lock)."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from billing.models import LedgerEntry
from billing.services import charges_post_hour, ledger_verify, usage_rollup_hour

from .conftest import H, minutes


@pytest.mark.django_db(transaction=True)
def test_concurrent_pricing_of_one_hour_appends_once(world, admit):
    for i in range(20):
        admit(gpus=8, reserved=H, running=H + minutes(i), ended=H + minutes(50), name=f"w{i}")
    later = H + timedelta(days=1)
    usage_rollup_hour(hour=H, now=later, telemetry={})
    barrier = threading.Barrier(2)
    errors = []

    def work():
        try:
            barrier.wait()
            charges_post_hour(hour=H, now=later)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert LedgerEntry.objects.count() == 39  # 19 frozen (w0 ran at once) + 20 running, once
    assert ledger_verify().ok
