"""`manage.py seed_demo`: the demo organisation (idempotent; prints the same every run).

`--history 30d` also gives it a past: a month of work replayed through the engine and billed
(portal/demo_history.py); seeding again adds nothing once the history is there.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.demo import seed_demo
from portal.demo_history import HistoryError, parse_span, seed_history


class Command(BaseCommand):
    help = ("Create the demo organisation: 2 departments, 5 teams, 3 clusters with A100, H100, "
            "V100 and CPU nodes, and the users admin, alice, bob. Safe to run again.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--history", metavar="SPAN", default="",
            help="also replay SPAN of past work (such as 30d or 72h, at most 90d) through the "
                 "engine and the billing pipeline, so charts, invoices and budgets have a past")

    def handle(self, *args: Any, **options: Any) -> None:
        span = None
        if options["history"]:
            try:
                span = parse_span(options["history"])
            except HistoryError as e:
                raise CommandError(str(e)) from e
        for line in seed_demo().lines:
            self.stdout.write(line)
        if span is not None:
            for line in seed_history(span):
                self.stdout.write(line)
