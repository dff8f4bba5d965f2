"""`manage.py seed_demo`: the demo organisation (idempotent; prints the same every run)."""

from typing import Any

from django.core.management.base import BaseCommand

from portal.demo import seed_demo


class Command(BaseCommand):
    help = ("Create the demo organisation: 2 departments, 5 teams, 3 clusters with A100, H100, "
            "V100 and CPU nodes, and the users admin, alice, bob and a lead for every team. "
            "Safe to run again.")

    def handle(self, *args: Any, **options: Any) -> None:
        for line in seed_demo().lines:
            self.stdout.write(line)
