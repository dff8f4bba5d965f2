"""`manage.py simulate FILE [--out F]`: replay a scenario; no database needed."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from scheduling.replay import EtaOptions, ScenarioError, load_scenario, run_scenario


class Command(BaseCommand):
    """Replay a scenario file (YAML or JSON) through the engine and print the JSON result."""

    help = "Replay a scenario (SCENARIO-FORMAT.md) on a simulated clock; JSON on stdout."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file", help="scenario file (.yaml, .yml or .json)")
        parser.add_argument("--out", help="write the JSON result to this file instead")
        parser.add_argument("--eta", action="store_true",
                            help="record each workload's start forecast at its submission "
                                 "(eta_at_submit), as the live system makes it")
        parser.add_argument("--eta-every", type=int, default=1, metavar="N",
                            help="with --eta: forecast every Nth submission only (default 1)")
        parser.add_argument("--eta-hints", action="store_true",
                            help="with --eta: take each workload's duration_s as its hint")
        parser.add_argument("--eta-arrivals", type=float, default=None, metavar="S",
                            help="with --eta: the submissions of the last S seconds come "
                                 "again S later during each forecast (default: the live "
                                 "setting, ALLOT_ETA_ARRIVALS_S; 0: no new work)")
        parser.add_argument("--eta-arrivals-repeat", type=int, default=None, metavar="K",
                            help="with --eta: those submissions come again K times, each "
                                 "S after the last (default: ALLOT_ETA_ARRIVALS_REPEAT)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            scenario = load_scenario(options["file"])
        except ScenarioError as exc:
            for line in exc.problems:
                sys.stderr.write(f"{line}\n")
            sys.stderr.flush()
            sys.exit(2)
        for warning in scenario.warnings:
            sys.stderr.write(f"warning: {warning}\n")
        eta = None
        if options.get("eta"):
            if options["eta_every"] < 1:
                sys.stderr.write(f"--eta-every {options['eta_every']}: must be at least 1\n")
                sys.exit(2)
            arrivals = options.get("eta_arrivals")
            if arrivals is None:
                arrivals = float(settings.ALLOT_ETA.get("arrivals_s", 0.0))
            if not math.isfinite(arrivals) or arrivals < 0:
                sys.stderr.write(f"--eta-arrivals {arrivals}: must be 0 or more seconds\n")
                sys.exit(2)
            repeat = options.get("eta_arrivals_repeat")
            if repeat is None:
                repeat = int(settings.ALLOT_ETA.get("arrivals_repeat", 1))
            if repeat < 1:
                sys.stderr.write(f"--eta-arrivals-repeat {repeat}: must be at least 1\n")
                sys.exit(2)
            eta = EtaOptions(every=options["eta_every"], hints=bool(options["eta_hints"]),
                             arrivals_s=arrivals, arrivals_repeat=repeat)
        result = run_scenario(scenario, eta=eta)
        text = json.dumps(result, indent=1, ensure_ascii=False)
        if options.get("out"):
            with open(options["out"], "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        else:
            self.stdout.write(text)
