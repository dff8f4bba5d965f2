"""The ledger check: the hash chain and every issued invoice's total against the ledger,
recorded each time it runs (`LedgerVerification`), so /metrics and alerts know when it last
ran and whether it held."""

from __future__ import annotations

import time
from datetime import datetime

from django.utils import timezone

from billing.models import Invoice, LedgerVerification
from billing.services.invoices import invoice_ledger_total
from billing.services.ledger import ledger_verify


def ledger_check(*, method: str = "auto", now: datetime | None = None) -> LedgerVerification:
    """Verify the chain (`ledger_verify`), then each issued invoice's total; record and return
    the outcome, naming the first problem found."""
    started = time.monotonic()
    result = ledger_verify(method=method)
    invoices, problem = 0, ""
    if not result.ok:
        problem = (f"ledger tampered: first bad entry #{result.first_bad_seq}: "
                   f"{result.problem} ({result.checked} entries verified before it)")
    else:
        for invoice in Invoice.objects.filter(state="issued").select_related("cost_center"):
            expected = invoice_ledger_total(invoice)
            if invoice.total != expected:
                problem = (f"invoice {invoice.number}: total {invoice.total} {invoice.currency} "
                           f"but its ledger entries (up to #{invoice.ledger_seq_max}) sum to "
                           f"{expected}")
                break
            invoices += 1
    return LedgerVerification.objects.create(
        ran_at=now or timezone.now(), ok=not problem, checked=result.checked,
        invoices=invoices, first_bad_seq=result.first_bad_seq, problem=problem,
        seconds=time.monotonic() - started)
