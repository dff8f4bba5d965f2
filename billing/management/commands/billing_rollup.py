"""`manage.py billing_rollup`: meter and price complete hours (the hourly task, by hand)."""

from datetime import datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing.metering import hour_floor
from billing.services import budgets_evaluate, rollup_and_post


class Command(BaseCommand):
    help = "Roll up and price hours [--from, --to) (default: the last complete hour)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--from", dest="start", help="ISO time, e.g. 2026-03-01T00:00Z")
        parser.add_argument("--to", dest="end", help="ISO time (exclusive)")

    def handle(self, *args, start=None, end=None, **options) -> None:
        now = timezone.now()
        try:
            hour = hour_floor(datetime.fromisoformat(start)) if start else hour_floor(now) - \
                timedelta(hours=1)
            stop = hour_floor(datetime.fromisoformat(end)) if end else hour + timedelta(hours=1)
        except ValueError as exc:
            raise CommandError(f"bad time: {exc}") from exc
        except OverflowError as exc:  # the hour after the last one a datetime can hold
            raise CommandError(f"time out of range ({start} to {end}): {exc}") from exc
        if hour.tzinfo is None or stop.tzinfo is None:
            raise CommandError("times must carry a timezone (e.g. Z or +00:00)")
        while hour < stop:
            rollup, posted = rollup_and_post(hour=hour, now=now)
            self.stdout.write(
                f"{hour:%Y-%m-%d %H:00}: records +{rollup.created} ~{rollup.updated} "
                f"={rollup.unchanged}, ledger +{posted.appended} "
                f"(corrections {posted.corrections})"
            )
            hour += timedelta(hours=1)
        for firing in budgets_evaluate(now=now):
            self.stdout.write(f"budget: {firing.message}")
