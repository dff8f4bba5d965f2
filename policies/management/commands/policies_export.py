"""`manage.py policies_export [DIR]`: write the stored policies as YAML (one file each in DIR,
or all on standard output), ready to commit and to load back with policies_sync."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from policies.selectors import policy_list
from policies.services import policy_content
from policies.specs import dump_yaml


class Command(BaseCommand):
    help = "Export policies as YAML files (or to standard output)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", default="", help="Directory to write into.")

    def handle(self, *args: Any, **options: Any) -> None:
        contents = [policy_content(p) for p in policy_list()]
        if not options["path"]:
            self.stdout.write(dump_yaml({"policies": contents}), ending="")
            return
        directory = Path(options["path"])
        directory.mkdir(parents=True, exist_ok=True)
        for content in contents:
            (directory / f"{content['name']}.yaml").write_text(dump_yaml(content),
                                                                encoding="utf-8")
        self.stdout.write(f"{len(contents)} policies written to {directory}")
