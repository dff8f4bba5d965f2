"""`manage.py policies_test DIR`: run the YAML test cases of the policy files in DIR.

Needs no database, so a policy repository can run it in its own CI. Exits 1 when a case fails
or a policy is invalid, 2 when a file cannot be read.
"""

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from policies.specs import PolicyFileError, read_dir, read_file, run_tests
from policies.variables import sample_variables


class Command(BaseCommand):
    help = "Run the test cases of policy YAML files (exit non-zero on a failure)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A directory of policy files, or one file.")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        try:
            files = [read_file(path)] if path.is_file() else read_dir(path)
        except PolicyFileError as exc:
            self.stderr.write(f"error: {exc}")
            sys.exit(2)
        results = run_tests(files, sample_variables())
        failed = [r for r in results if not r.passed]
        for r in results:
            mark = "ok  " if r.passed else "FAIL"
            line = f"{mark} {r.policy}: {r.case}: {r.detail}"
            self.stdout.write(line) if r.passed else self.stderr.write(line)
        policies = sum(len(f.policies) for f in files)
        self.stdout.write(
            f"{len(results) - len(failed)} passed, {len(failed)} failed "
            f"({policies} policies in {len(files)} files)"
        )
        if failed:
            sys.exit(1)
