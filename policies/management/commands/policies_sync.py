"""`manage.py policies_sync DIR`: make the stored policies match the YAML files in DIR.

All or nothing: one invalid policy (bad CEL, unknown queue in scope) and nothing is saved.
Each change becomes a new version (author: --user, comment: --comment).
"""

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.history import Source, history_context
from policies.services import policies_sync
from policies.specs import PolicyFileError, read_dir, read_file


class Command(BaseCommand):
    help = "Load policy YAML files into the database (create, update; --prune turns off others)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A directory of policy files, or one file.")
        parser.add_argument("--prune", action="store_true",
                            help="Turn off stored policies that are not in the files.")
        parser.add_argument("--user", default="", help="Username recorded as the author.")
        parser.add_argument("--comment", default="", help="Recorded on each new version.")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        try:
            files = [read_file(path)] if path.is_file() else read_dir(path)
        except PolicyFileError as exc:
            raise CommandError(str(exc)) from exc
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"unknown user {options['user']!r}")
        definitions = [d for f in files for d in f.policies]
        try:
            with history_context(Source.IMPORT, user=user):
                report = policies_sync(user=user, definitions=definitions,
                                       prune=options["prune"], comment=options["comment"])
        except ValidationError as exc:
            lines = [f"{name}: {m}" for name, ms in exc.message_dict.items() for m in ms]
            raise CommandError("nothing saved:\n  " + "\n  ".join(lines)) from exc
        for label, names in (("created", report.created), ("updated", report.updated),
                             ("unchanged", report.unchanged), ("turned off", report.turned_off)):
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
        self.stdout.write(
            f"{len(report.created)} created, {len(report.updated)} updated, "
            f"{len(report.unchanged)} unchanged, {len(report.turned_off)} turned off"
        )
