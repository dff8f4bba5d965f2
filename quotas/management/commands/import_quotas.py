"""`manage.py import_quotas FILE...`: Kueue, Volcano or Koordinator YAML into the tree."""

import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.interop import quotas_import
from quotas.interop.loader import MAX_BYTES


class Command(BaseCommand):
    help = ("Import a quota tree from Kueue (ResourceFlavor, Cohort, ClusterQueue, LocalQueue), "
            "Volcano (Queue) or Koordinator (ElasticQuota) manifests; all or nothing.")
    stealth_options = ("stdin",)  # call_command(..., stdin=stream), as createsuperuser takes

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+",
                            help="YAML (or JSON) files; '-' reads one from standard input")
        parser.add_argument("--flavor", help="flavor of plain nvidia.com/gpu, cpu, memory "
                            "(Volcano, Koordinator)")
        parser.add_argument("--replace", action="store_true",
                            help="delete queues the files do not name")
        parser.add_argument("--dry-run", action="store_true", help="validate, save nothing")
        parser.add_argument("--user", default="",
                            help="username the changes are recorded under in the history")

    def handle(self, *args: Any, **options: Any) -> None:
        sources = []
        if options["files"].count("-") > 1:
            raise CommandError(f"'-' (standard input) given {options['files'].count('-')} "
                               "times: standard input can be read once")
        for name in options["files"]:
            if name == "-":
                sources.append(("<stdin>", _read_stdin(options.get("stdin") or sys.stdin)))
                continue
            path = Path(name)
            if not path.is_file():
                raise CommandError(f"{name}: no such file")
            if path.stat().st_size > MAX_BYTES:
                raise CommandError(f"{name}: {path.stat().st_size} bytes is larger than the "
                                   f"limit of {MAX_BYTES}")
            sources.append((name, path.read_bytes()))
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"unknown user {options['user']!r}")
        try:
            result = quotas_import(sources, default_flavor=options["flavor"],
                                   prune=options["replace"], dry_run=options["dry_run"],
                                   user=user)
        except ValidationError as exc:
            raise CommandError("import refused, nothing changed:\n  "
                               + "\n  ".join(exc.messages)) from exc
        r = result.replaced
        verb = "would import" if result.dry_run else "imported"
        self.stdout.write(
            f"{verb} {result.system}: {len(r.created)} queue(s) created, {len(r.updated)} "
            f"updated, {len(r.deleted)} deleted, {len(r.flavors_created)} flavor(s) created"
        )
        for line in result.skipped:
            self.stdout.write(f"note: {line}")
        for warning in r.warnings:
            self.stdout.write(self.style.WARNING(f"warning: {warning}"))


def _read_stdin(stream: Any) -> bytes:
    """The whole of standard input as bytes (the file form reads bytes too), refusing a
    terminal (nothing was piped in: reading would wait for typing) and more than MAX_BYTES."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        raise CommandError("'-' reads the manifests from standard input, which is a terminal: "
                           "pipe them in (manage.py import_quotas - < kueue.yaml)")
    data = getattr(stream, "buffer", stream).read(MAX_BYTES + 1)
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_BYTES:
        raise CommandError(f"<stdin>: more than the limit of {MAX_BYTES} bytes")
    return data
