"""`manage.py billing_verify`: recompute the ledger's SHA-256 chain, name the first bad entry."""

import time

from django.core.management.base import BaseCommand, CommandError

from billing.services import ledger_verify


class Command(BaseCommand):
    help = "Recompute the ledger's hash chain; exit 1 naming the first tampered entry."

    def handle(self, *args, **options) -> None:
        started = time.monotonic()
        result = ledger_verify()
        elapsed = time.monotonic() - started
        if not result.ok:
            raise CommandError(
                f"ledger tampered: first bad entry #{result.first_bad_seq}: {result.problem} "
                f"({result.checked} entries verified before it)"
            )
        self.stdout.write(
            self.style.SUCCESS(f"ledger OK: {result.checked} entries verified in {elapsed:.2f} s")
        )
