"""`manage.py export_quotas --format kueue|volcano|koordinator`: the tree as manifests."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from quotas.interop import FORMATS, quotas_export


class Command(BaseCommand):
    help = "Print the quota tree as Kueue, Volcano or Koordinator manifests (multi-doc YAML)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=FORMATS, required=True)
        parser.add_argument("--kueue-version", choices=("v1beta1", "v1beta2"), default="v1beta2",
                            help="Kueue API version (v1beta1: spec.cohort; v1beta2: cohortName)")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(quotas_export(options["format"], kueue_version=options["kueue_version"]),
                          ending="")
