"""Start forecast accuracy: replay the Philly trace and compare each workload's forecast made
at its submission (`eta_at_submit`, as the live system makes it: no duration hints, run times
from the queue's finished runs) with when it really started.

    python -m bench.eta_accuracy                       # the first 10,000 jobs, every 5th forecast
    python -m bench.eta_accuracy --jobs 20000 --every 10
    python -m bench.eta_accuracy --offset 40000 --jobs 10000   # a later stretch of the trace

The trace directory comes from ALLOT_TRACES_DIR (philly_pollux_jobs.csv; bench.engine reads
it and builds the elastic scenario: tenants as leaves with min by GPU-hours, 1.3 x the mean
demand in 8-GPU nodes). The replay runs until every sampled workload has started.

Figures: the share of forecasts whose range [low, high] held the actual start (within one
cycle interval, the scenario's 60 s: the live cycle's granularity), over every sampled
workload and over those that waited; the median absolute error of `start` against the actual
start, and that error relative to the actual wait (per workload, over those that waited at
least 10 minutes), with the median wait. Targets: >= 80% inside, median error < 25% of the
wait. Prints one line of JSON at the end (`{"bench": "eta_accuracy", ...}`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from bench.engine import TRACE_FILE, philly_scenario, read_philly, traces_dir
from scheduling.replay import EtaOptions, load_scenario, run_scenario

WAITED_S = 600.0


def arg(argv: list[str], name: str, default: int) -> int:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def accuracy(workloads: dict[str, Any], tolerance_s: float) -> dict[str, Any]:
    """The figures over the workloads that have a forecast and started."""
    rows = []
    for w in workloads.values():
        eta = w.get("eta_at_submit")
        if not eta or not w["admissions"]:
            continue
        actual = w["admissions"][0]["at"]
        rows.append((eta, actual, actual - eta["at"]))
    inside = waited_inside = waited = early = late = 0
    errors: list[float] = []
    relative: list[float] = []
    waits: list[float] = []
    unknown = 0
    for eta, actual, wait in rows:
        low, high, start = eta["low"], eta["high"], eta["start"]
        hit = low is not None and low - tolerance_s <= actual and (
            high is None or actual <= high + tolerance_s)
        inside += hit
        if not hit and low is not None:
            late += actual > low  # started after the range: the forecast was too early
            early += actual < low
        if start is None:
            unknown += 1
            continue
        err = abs(start - actual)
        errors.append(err)
        if wait >= WAITED_S:
            waited += 1
            waited_inside += hit
            waits.append(wait)
            relative.append(err / wait)
    n = len(rows)
    return {
        "forecasts": n,
        "inside_share": round(inside / n, 3) if n else None,
        "waited": waited,
        "waited_inside_share": round(waited_inside / waited, 3) if waited else None,
        "median_abs_error_s": round(statistics.median(errors), 1) if errors else None,
        "median_wait_s_waited": round(statistics.median(waits), 1) if waits else None,
        "median_relative_error_waited": round(statistics.median(relative), 3)
        if relative else None,
        "beyond_horizon": unknown,
        "started_before_range": early,
        "started_after_range": late,
    }


def main(argv: list[str]) -> int:
    jobs_n = arg(argv, "--jobs", 10_000)
    every = arg(argv, "--every", 5)
    offset = arg(argv, "--offset", 0)
    path = traces_dir() / TRACE_FILE
    if not path.exists():
        print(f"[eta-accuracy] skipped: {path} not found (set ALLOT_TRACES_DIR)")
        return 0
    jobs = read_philly(path)[offset:offset + jobs_n]
    t0 = jobs[0][0]
    jobs = [(s - t0, d, g, tenant) for s, d, g, tenant in jobs]
    data, facts = philly_scenario(jobs, elastic=True)
    data["until"] = facts["until_s"] + 60 * 86_400  # until the sampled ones have started
    scenario = load_scenario(data)
    levels = tuple(float(x) for x in argv[argv.index("--levels") + 1].split(",")) \
        if "--levels" in argv else EtaOptions().levels
    opts = EtaOptions(every=every, levels=levels, hints="--hints" in argv,
                      point=float(argv[argv.index("--point") + 1]) if "--point" in argv
                      else EtaOptions().point,
                      arrivals_s=float(arg(argv, "--arrivals", 0)),
                      step_rel=float(argv[argv.index("--step-rel") + 1]) if "--step-rel" in argv
                      else EtaOptions().step_rel)
    c0, w0 = time.process_time(), time.perf_counter()
    out = run_scenario(scenario, eta=opts)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    figures = accuracy(out["workloads"], scenario.settings.cycle_interval_s)
    figures.update({"bench": "eta_accuracy", "jobs": len(jobs), "offset": offset,
                    "every": every, "fleet_gpus": facts["fleet_gpus"],
                    "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)})
    print(f"[eta-accuracy] Philly jobs {offset}..{offset + len(jobs)} (elastic, "
          f"{facts['fleet_gpus']} GPUs), a forecast at every {every}th submission: "
          f"{figures['forecasts']} forecasts, replay {wall:.1f} s wall, {cpu:.1f} s CPU")
    print(f"[eta-accuracy] actual start inside the range: {figures['inside_share']} of all; "
          f"{figures['waited_inside_share']} of the {figures['waited']} that waited "
          f">= {WAITED_S:.0f} s (target >= 0.8)")
    print(f"[eta-accuracy] median |start - actual|: {figures['median_abs_error_s']} s; "
          f"over those that waited: median error / wait {figures['median_relative_error_waited']}"
          f" (target < 0.25), median wait {figures['median_wait_s_waited']} s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
