"""One sha256 per replay of the scenario runner's whole output: a check that a change to the
engine or the runner decides exactly what the code before it decided.

    python bench/replay_digest.py                      # everything below
    python bench/replay_digest.py scenarios            # every scenario file under tests/scenarios
    python bench/replay_digest.py kueue kueue-large    # the two Kueue replays of bench/engine.py
    python bench/replay_digest.py philly --jobs 2000   # both Philly replays, first 2,000 jobs
    python bench/replay_digest.py 04-borrow-and-reclaim philly-static

Items: every `*.yaml` / `*.yml` / `*.json` file under tests/scenarios (by file stem, as
tests/scenarios/test_scenarios.py loads them), `kueue` (the baseline, 15,000 workloads),
`kueue-large` (1,000 queues, 50,000 workloads), `philly-elastic` and `philly-static` (the trace
from ALLOT_TRACES_DIR, or bench.engine's default place); `philly` picks both.

The digest covers the runner's result as the command prints it (every workload's state,
admissions, preemptions, reasons with their messages, finish time; the metrics; in its order),
plus the loader's warnings; for a scenario the loader refuses, its list of problems. Wall-clock
timing fields are left out (the runner's result has none; bench.engine adds them around it).

It imports the code of the current directory, so one copy of this file compares two trees:

    cd /path/to/old && python /path/to/new/bench/replay_digest.py scenarios > old.txt
    cd /path/to/new && python bench/replay_digest.py scenarios > new.txt && diff old.txt new.txt

`scheduling.replay` is used where it exists, else `scheduling.simulate` (its former name).
Lines go to stdout as `<sha256>  <item>`; the time each item took goes to stderr.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

# The tree to digest is the current directory's, not the one this file lives in.
sys.path.insert(0, os.getcwd())

SCENARIO_SUFFIXES = {".yaml", ".yml", ".json"}
PHILLY = ("philly-elastic", "philly-static")
KUEUE = {"kueue": (5, 6, 1.0), "kueue-large": (100, 10, 0.1)}
TIMING_KEYS = frozenset({"wall_s", "load_s", "run_s", "cpu_s", "read_s"})


def runner_module() -> ModuleType:
    """The scenario runner of the tree in the current directory."""
    for name in ("scheduling.replay", "scheduling.simulate"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name not in (name, "scheduling"):
                raise
    raise SystemExit("no scenario runner (scheduling.replay or scheduling.simulate) under "
                     f"{os.getcwd()}")


def scenario_files() -> list[Path]:
    here = Path(os.getcwd()) / "tests" / "scenarios"
    return sorted(p for p in here.iterdir() if p.suffix in SCENARIO_SUFFIXES and p.is_file())


def without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def digest(doc: Any) -> str:
    text = json.dumps(without_timing(doc), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def replay(sim: ModuleType, source: Any) -> dict[str, Any]:
    """The loader's warnings and the runner's result, or the loader's problems."""
    try:
        scenario = sim.load_scenario(source)
    except sim.ScenarioError as exc:
        return {"problems": [str(p) for p in exc.problems]}
    return {"warnings": list(scenario.warnings), "result": sim.run_scenario(scenario)}


def main(argv: list[str]) -> int:
    jobs: int | None = None
    if "--jobs" in argv:
        i = argv.index("--jobs")
        jobs = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    sim = runner_module()
    files = {p.stem: p for p in scenario_files()}
    wanted = set(argv) or {"scenarios", *KUEUE, "philly"}
    if "philly" in wanted:
        wanted |= set(PHILLY)
    unknown = wanted - {"scenarios", "philly", *KUEUE, *PHILLY, *files}
    if unknown:
        sys.stderr.write(f"unknown items: {', '.join(sorted(unknown))}\n")
        return 2
    items: list[tuple[str, Any]] = [(stem, str(path)) for stem, path in files.items()
                                    if "scenarios" in wanted or stem in wanted]
    bench: Any = None
    if wanted & {*KUEUE, *PHILLY}:
        bench = importlib.import_module("bench.engine")
    for name, shape in KUEUE.items():
        if name in wanted:
            items.append((name, lambda shape=shape: bench.kueue_scenario(*shape)))
    if wanted & set(PHILLY):
        path = bench.traces_dir() / bench.TRACE_FILE
        if not path.exists():
            sys.stderr.write(f"{path} not found (set ALLOT_TRACES_DIR)\n")
            return 2
        trace = bench.read_philly(path)[:jobs]
        for name in PHILLY:
            if name in wanted:
                elastic = name == "philly-elastic"
                items.append((name, lambda elastic=elastic: bench.philly_scenario(
                    trace, elastic=elastic)[0]))
    for name, source in items:
        t0 = time.perf_counter()
        doc = replay(sim, source() if callable(source) else source)
        print(f"{digest(doc)}  {name}", flush=True)
        sys.stderr.write(f"{name}: {time.perf_counter() - t0:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
