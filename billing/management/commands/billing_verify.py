"""`manage.py billing_verify`: recompute the ledger's SHA-256 chain, name the first bad entry,
and check every issued invoice's total against the ledger entries it covers."""

import time

from django.core.management.base import BaseCommand, CommandError

from billing.models import Invoice
from billing.services import ledger_verify
from billing.services.invoices import invoice_ledger_total


class Command(BaseCommand):
    help = ("Recompute the ledger's hash chain and compare invoice totals with the ledger; "
            "exit 1 naming the first tampered entry or mismatching invoice.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--python", action="store_true",
                            help="walk the chain in Python instead of in the database")

    def handle(self, *args, python: bool = False, **options) -> None:
        started = time.monotonic()
        result = ledger_verify(method="python" if python else "auto")
        elapsed = time.monotonic() - started
        if not result.ok:
            raise CommandError(
                f"ledger tampered: first bad entry #{result.first_bad_seq}: {result.problem} "
                f"({result.checked} entries verified before it)"
            )
        invoices = 0
        for invoice in Invoice.objects.filter(state="issued").select_related("cost_center"):
            expected = invoice_ledger_total(invoice)
            if invoice.total != expected:
                raise CommandError(
                    f"invoice {invoice.number}: total {invoice.total} {invoice.currency} but "
                    f"its ledger entries (up to #{invoice.ledger_seq_max}) sum to {expected}"
                )
            invoices += 1
        self.stdout.write(self.style.SUCCESS(
            f"ledger OK: {result.checked} entries verified in {elapsed:.2f} s; "
            f"{invoices} invoice totals match the ledger"
        ))
