"""`manage.py billing_verify`: recompute the ledger's SHA-256 chain, name the first bad entry,
and check every issued invoice's total against the ledger entries it covers; the outcome is
recorded (`LedgerVerification`: /metrics reports the last one)."""

from django.core.management.base import BaseCommand, CommandError

from billing.services import ledger_check


class Command(BaseCommand):
    help = ("Recompute the ledger's hash chain and compare invoice totals with the ledger; "
            "exit 1 naming the first tampered entry or mismatching invoice.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--python", action="store_true",
                            help="walk the chain in Python instead of in the database")

    def handle(self, *args, python: bool = False, **options) -> None:
        check = ledger_check(method="python" if python else "auto")
        if not check.ok:
            raise CommandError(check.problem)
        self.stdout.write(self.style.SUCCESS(
            f"ledger OK: {check.checked} entries verified in {check.seconds:.2f} s; "
            f"{check.invoices} invoice totals match the ledger"
        ))
