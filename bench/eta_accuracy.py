"""Start forecast accuracy: replay the Philly trace and compare each workload's forecast made
at its submission (`eta_at_submit`, as the live system makes it: no duration hints, run times
from the queue's finished runs) with when it really started.

    python -m bench.eta_accuracy --jobs 3000 --every 10   # the range: as before, widened
    python -m bench.eta_accuracy --jobs 3000 --every 10 --hints   # every run time known
    python -m bench.eta_accuracy --jobs 3000 --every 10 --config no-arrivals,new
    python -m bench.eta_accuracy --jobs 10000 --every 40 --config new
    python -m bench.eta_accuracy --jobs 3000 --config old.json,new.json   # from --dump files
    python -m bench.eta_accuracy --offset 40000 --jobs 10000   # a later stretch of the trace
    python -m bench.eta_accuracy --jobs 3000 --every 10 --config calibrated --breakdown

The trace directory comes from ALLOT_TRACES_DIR (philly_pollux_jobs.csv; bench.engine reads
it and builds the elastic scenario: tenants as leaves with min by GPU-hours, 1.3 x the mean
demand in 8-GPU nodes). The replay runs until every sampled workload has started. Each
configuration (`CONFIGS`: `new`, the live one; `no-pad`, the live one before the range's low
end took no new work and the range was widened by half the resolution, the default pair;
`long`, the live one with a start 12 h or more away moved halfway to the one with the median
level chained (live until the replay was corrected, docs/engine.md §13); `step-last`,
the live one with the resolution's cycle at the last of the ends it takes; `no-arrivals`, the
live one with no new work during the forecast; `old`, the forecast before the start took the median
of the starts; ...) replays the window once; `--dump PREFIX` writes each one's forecasts
(PREFIX.<config>.json) and a `.json` name in `--config` reads such a file instead.

Figures, per configuration, side by side:
- inside: the share of forecasts whose range [low, high] held the actual start (within one
  cycle interval, the scenario's 60 s: the live cycle's granularity), over every forecast and
  over those that waited at least 10 minutes, and the median width of the range over the wait
  there (a wider range holds more: the two go together);
- median error / wait, waited: over the workloads that waited at least 10 minutes, the median
  of |start - actual start| / actual wait (the issue's measure; the target is < 0.25);
- median error / wait, all: over every forecast, zero waits included, of
  max(0, |start - actual| - 60 s) / max(wait, 60 s): a start within one cycle of the forecast
  counts as exact, and a workload that started at once but was forecast to wait an hour
  counts as an error of 60 (not dropped). It is lower than the first, as work that did not
  wait is the easy case: the first is the one the target is judged on;
- the median absolute error and wait, and how many started before or after their range.

`--breakdown`: where the error is, per configuration (`breakdown`): by wait length, size,
queue and simulated start, the median error / wait and the forecast / actual wait quartiles.
The `calibrated` configuration (the live forecast scaled by how the queue's earlier first
forecasts came out, scheduling.engine.calibration) also prints its forecasts before the
calibration as `calibrated, raw`, from the same replay.
Prints one line of JSON at the end (`{"bench": "eta_accuracy", ...}`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from typing import Any

from bench.engine import TRACE_FILE, philly_scenario, read_philly, traces_dir
from scheduling.engine.forecast import LIVE_LEVELS
from scheduling.replay import EtaOptions, load_scenario, run_scenario

WAITED_S = 600.0


def arg(argv: list[str], name: str, default: int) -> int:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def forecast_rows(workloads: dict[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """(eta_at_submit, actual start) of the workloads that have a forecast and started."""
    return [(w["eta_at_submit"], w["admissions"][0]["at"]) for w in workloads.values()
            if w.get("eta_at_submit") and w["admissions"]]


def raw_rows(workloads: dict[str, Any]) -> list[tuple[dict[str, Any], float]]:
    """`forecast_rows` with each forecast as it was before the calibration."""
    return [({**eta, **dict(zip(("start", "low", "high"), eta["raw"], strict=True))}, actual)
            for eta, actual in forecast_rows(workloads)]


def accuracy(pairs: list[tuple[dict[str, Any], float]], tolerance_s: float) -> dict[str, Any]:
    """The figures over (forecast, actual start) pairs (module docstring)."""
    rows = [(eta, actual, actual - eta["at"]) for eta, actual in pairs]
    inside = waited_inside = waited = early = late = 0
    errors: list[float] = []
    relative: list[float] = []
    waits: list[float] = []
    widths: list[float] = []  # (high - low) / wait, waited, the range within the horizon
    unknown = 0
    every: list[float] = []  # over every forecast (module docstring)
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
        every.append(max(0.0, err - tolerance_s) / max(wait, tolerance_s))
        if wait >= WAITED_S:
            waited += 1
            waited_inside += hit
            waits.append(wait)
            relative.append(err / wait)
            if low is not None and high is not None:
                widths.append((high - low) / wait)
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
        "median_relative_error_all": round(statistics.median(every), 3) if every else None,
        "median_width_waited": round(statistics.median(widths), 3) if widths else None,
        "zero_wait": sum(1 for _e, _a, wait in rows if wait <= tolerance_s),
        "beyond_horizon": unknown,
        "started_before_range": early,
        "started_after_range": late,
    }


CONFIGS: dict[str, dict[str, Any]] = {
    # the start from one fast-forward, work not started at its queue's latest ten runs' mean
    # (engine.forecast.RunTimes.point), the range from p25 and p95 (the live one until the
    # median of the starts)
    "old": {"start_stat": "mean", "levels": (0.25, 0.95), "arrivals_s": 0.0,
            "step_at": "last", "long_wait_s": None, "free_levels": (), "pad": False},
    # the live one: the start as the median of the simulated starts (the mean-run
    # fast-forward and one at each of the quantiles 0.25, 0.5 and 0.95 of the run times),
    # the last day's submissions coming again a day, two and three days later
    "new": {},
    # the live one before the arrivals: no new work during the forecast
    "no-arrivals": {"arrivals_s": 0.0},
    # the live one before the resolution's cycle went halfway: at the last of the ends taken
    "step-last": {"step_at": "last"},
    # before the latest runs: work not started at its queue's 30-day mean run time
    "older": {"recent_runs": 0, "start_stat": "mean", "levels": (0.25, 0.95),
              "arrivals_s": 0.0, "step_at": "last", "long_wait_s": None, "free_levels": (),
              "pad": False},
    # the live one scaled by how the queue's earlier forecasts came out
    # (scheduling.engine.calibration); the same replay's forecasts before it as "..., raw"
    "calibrated": {"calibrate": True},
    # the live one with a start 12 h or more away moved halfway to the one with the median
    # level's work not started at its mean (engine.forecast.estimate, long_wait_s; live from
    # 2026-12-04 until the replay decided as the workers do)
    "long": {"long_wait_s": 43200.0},
    # a long wait's start all the way to that one
    "long-chained": {"long_wait_s": 43200.0, "long_weight": 1.0},
    # studied, not adopted (docs/engine.md §13): running work at its conditional median in the
    # mean-run fast-forward, the start the median of it and the p50 and p95 ones
    "m50-start": {"point": 0.5, "start_levels": (0.5, 0.95)},
    # studied: the start's run times from the queue's latest runs by start, running ones
    # included at their age plus the conditional mean (replay.eta.recent_started)
    "started": {"recent_started": True},
    # the live one before its range's p25 fast-forward took no new work and the range was
    # widened by half the resolution at each end (the range with hints was a point)
    "no-pad": {"free_levels": (), "pad": False},
    # the p25 fast-forward with no new work, the range not widened
    "low-free": {"pad": False},
}


def main(argv: list[str]) -> int:
    jobs_n = arg(argv, "--jobs", 10_000)
    every = arg(argv, "--every", 5)
    offset = arg(argv, "--offset", 0)
    names = (argv[argv.index("--config") + 1].split(",") if "--config" in argv
             else ["no-pad", "new"])
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
    tolerance = scenario.settings.cycle_interval_s
    print(f"[eta-accuracy] Philly jobs {offset}..{offset + len(jobs)} (elastic, "
          f"{facts['fleet_gpus']} GPUs), a forecast at every {every}th submission")
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        if name.endswith(".json"):  # a --dump of an earlier run: its figures again
            with open(name) as fh:
                pairs = [(r["eta"], r["actual"]) for r in json.load(fh)
                         if r["actual"] is not None]
            results[name] = accuracy(pairs, tolerance)
            continue
        opts = EtaOptions(every=every, hints="--hints" in argv,
                          **{**CONFIGS[name], **overrides(argv)})
        c0, w0 = time.process_time(), time.perf_counter()
        out = run_scenario(scenario, eta=opts)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        figures = accuracy(forecast_rows(out["workloads"]), tolerance)
        figures.update({"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)})
        if opts.calibrate:  # the same forecasts before the calibration, from this replay
            results[f"{name}, raw"] = accuracy(raw_rows(out["workloads"]), tolerance)
        results[name] = figures
        print(f"[eta-accuracy] {name}: {figures['forecasts']} forecasts, replay {wall:.1f} s "
              f"wall, {cpu:.1f} s CPU")
        if "--breakdown" in argv:
            for text in breakdown(data, out["workloads"]):
                print(f"[eta-accuracy] {name}: {text}")
        if "--dump" in argv:  # one row per forecast, for studying where the error comes from
            dump(f"{argv[argv.index('--dump') + 1]}.{name}.json", data, out["workloads"])
            if out.get("first_forecasts"):
                dump_first(f"{argv[argv.index('--dump') + 1]}.{name}.first.json",
                           out["first_forecasts"], out["workloads"])
    table(results)
    print(json.dumps({"bench": "eta_accuracy", "jobs": len(jobs), "offset": offset,
                      "every": every, "fleet_gpus": facts["fleet_gpus"], **results}))
    return 0


def overrides(argv: list[str]) -> dict[str, Any]:
    """Options to try on every configuration: --levels 0.25,0.95 --point 0.75 --arrivals S
    --arrivals-repeat K (the recent submissions again K times) --long-wait S --long-weight W
    (a start S or more away moves W of the way to the chained one) --recent N --step-rel X --by-size
    --remaining-mean --tail-from-fleet --record-starts (each simulated start in the --dump file)
    --extra Q:STAT,... (more start fast-forwards recorded after the levels': STAT "quantile" or
    "mean", running work at quantile Q or at its conditional mean; "sample", every run time
    drawn, Q the sample's seed) --record-drain (the queue's work ahead and recent use in the
    --dump file) --all-pending (every pending workload forecast at each forecast, as the live
    refresh does; with --record-starts each one's first forecast goes to
    PREFIX.<config>.first.json) --cal-samples N --cal-band X (the calibration's, with
    `calibrated`)."""
    out: dict[str, Any] = {}
    if "--levels" in argv:
        out["levels"] = tuple(float(x) for x in argv[argv.index("--levels") + 1].split(","))
    if "--long-wait" in argv:
        out["long_wait_s"] = float(argv[argv.index("--long-wait") + 1])
    if "--long-weight" in argv:
        out["long_weight"] = float(argv[argv.index("--long-weight") + 1])
    if "--point" in argv:
        out["point"] = float(argv[argv.index("--point") + 1])
    if "--arrivals" in argv:
        out["arrivals_s"] = float(arg(argv, "--arrivals", 0))
    if "--arrivals-repeat" in argv:
        out["arrivals_repeat"] = arg(argv, "--arrivals-repeat", 1)
    if "--recent" in argv:
        out["recent_runs"] = arg(argv, "--recent", 0)
    if "--recent-stat" in argv:
        out["recent_stat"] = argv[argv.index("--recent-stat") + 1]
    if "--recent-running" in argv:
        out["recent_running"] = True
    if "--start-stat" in argv:
        out["start_stat"] = argv[argv.index("--start-stat") + 1]
    if "--by-size" in argv:
        out["by_size"] = True
    if "--free-levels" in argv:
        out["free_levels"] = tuple(float(x) for x in
                                   argv[argv.index("--free-levels") + 1].split(","))
    if "--recent-started" in argv:
        out["recent_started"] = True
    if "--tail-from-fleet" in argv:
        out["tail_from_fleet"] = True
    if "--remaining-mean" in argv:
        out["remaining_stat"] = "mean"
    if "--all-pending" in argv:
        out["all_pending"] = True
    if "--cal-samples" in argv:
        out["calibration_samples"] = arg(argv, "--cal-samples", 0)
    if "--cal-band" in argv:
        out["calibration_band"] = float(argv[argv.index("--cal-band") + 1])
    if "--record-starts" in argv:
        out["record_starts"] = True
    if "--extra" in argv:  # e.g. 0.5:quantile,0.5:mean
        out["extra"] = tuple((float(q), stat) for q, stat in (
            x.split(":") for x in argv[argv.index("--extra") + 1].split(",")))
    if "--record-drain" in argv:
        out["record_drain"] = True
    if "--step-at" in argv:
        out["step_at"] = argv[argv.index("--step-at") + 1]
    if "--step-rel" in argv:
        out["step_rel"] = float(argv[argv.index("--step-rel") + 1])
    return out


def wait_class(wait_s: float) -> str:
    """A wait's length class for the breakdown."""
    for limit, label in ((3600, "< 1 h"), (6 * 3600, "1-6 h"), (86_400, "6 h-1 day"),
                         (3 * 86_400, "1-3 days")):
        if wait_s < limit:
            return label
    return ">= 3 days"


def breakdown(data: dict[str, Any], workloads: dict[str, Any]) -> list[str]:
    """Where the error is: over the forecasts that waited >= 10 min, per wait length, size
    (GPUs) and queue (the eight with most forecasts): how many, the median |error| / wait, the
    forecast wait / actual wait at its quartiles (bias: < 1 too early, > 1 too late; spread)
    and how many were forecast to start before the actual start; then the same per simulated
    start (`eta_at_submit.starts`, with --record-starts)."""
    spec = {w["name"]: w for w in data["workloads"]}
    rows = []
    for name, w in workloads.items():
        eta = w.get("eta_at_submit")
        if not eta or not w["admissions"] or eta["start"] is None:
            continue
        actual = w["admissions"][0]["at"]
        wait = actual - eta["at"]
        if wait < WAITED_S:
            continue
        gpus = sum(p["count"] * p["gpus"] for p in spec[name]["pods"])
        rows.append((eta, actual, wait, spec[name]["queue"], gpus))

    def line(label: str, group: list[tuple[Any, ...]], pick: int | None = None) -> str:
        starts = [(r[0]["start"] if pick is None else r[0]["starts"][pick], r) for r in group]
        errs = [abs(s - r[1]) / r[2] if s is not None else math.inf for s, r in starts]
        ratio = sorted((s - r[0]["at"]) / r[2] if s is not None else math.inf
                       for s, r in starts)
        early = sum(1 for s, r in starts if s is not None and s < r[1])
        q = [quantile(ratio, x) for x in (0.25, 0.5, 0.75)]
        return (f"{label:28} {len(group):>6} {statistics.median(errs):>10.3f} "
                + "".join(f"{x:>9.2f}" for x in q) + f" {early:>7}")

    out = [f"{'':28} {'n':>6} {'err/wait':>10} {'fc/act25':>9} {'fc/act50':>9} "
           f"{'fc/act75':>9} {'early':>7}", line("all", rows)]
    for title, key in (("wait", lambda r: wait_class(r[2])),
                       ("GPUs", lambda r: str(int(r[4]) if r[4] < 8 else ">= 8")),
                       ("queue", lambda r: r[3])):
        groups: dict[str, list[tuple[Any, ...]]] = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r)
        order = sorted(groups, key=lambda k: -len(groups[k]))[:8] if title == "queue" \
            else sorted(groups, key=lambda k: min(r[2] for r in groups[k]))
        out += [line(f"{title} {k}", groups[k]) for k in order]
    if rows and all(r[0].get("starts") for r in rows):
        names = ["mean-run", *(f"p{round(x * 100)}" for x in LIVE_LEVELS)]
        out += [line(f"fast-forward {names[i] if i < len(names) else i}", rows, i)
                for i in range(len(rows[0][0]["starts"]))]
    return out


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile of sorted xs (linear between ranks)."""
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    if math.isinf(xs[hi]):
        return xs[hi] if pos > lo else xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def dump(path: str, data: dict[str, Any], workloads: dict[str, Any]) -> None:
    spec = {w["name"]: w for w in data["workloads"]}
    with open(path, "w") as fh:
        json.dump([{"name": n, "queue": spec[n]["queue"],
                    "gpus": sum(p["count"] * p["gpus"] for p in spec[n]["pods"]),
                    "duration_s": spec[n]["duration_s"], "eta": w["eta_at_submit"],
                    "actual": w["admissions"][0]["at"] if w["admissions"] else None}
                   for n, w in workloads.items() if w.get("eta_at_submit")], fh)


def dump_first(path: str, first: list[dict[str, Any]], workloads: dict[str, Any]) -> None:
    """Each pending workload's first forecast (`--all-pending --record-starts`) with its next
    admission at or after it (null: none): the calibration's samples, for studying."""
    with open(path, "w") as fh:
        json.dump([{**f, "actual": next((a["at"] for a in workloads[f["name"]]["admissions"]
                                         if a["at"] >= f["at"]), None)} for f in first], fh)


ROWS = [
    ("forecasts", "forecasts"),
    ("inside the range, all (target >= 0.8)", "inside_share"),
    ("inside the range, waited >= 10 min", "waited_inside_share"),
    ("  (how many waited >= 10 min)", "waited"),
    ("median |error| / wait, waited >= 10 min (target < 0.25)", "median_relative_error_waited"),
    ("median |error| / wait, all (zero waits counted)", "median_relative_error_all"),
    ("  (how many started within a cycle)", "zero_wait"),
    ("median |start - actual| (s)", "median_abs_error_s"),
    ("median wait, waited (s)", "median_wait_s_waited"),
    ("median range width / wait, waited", "median_width_waited"),
    ("started before the range", "started_before_range"),
    ("started after the range", "started_after_range"),
]


def table(results: dict[str, dict[str, Any]]) -> None:
    """The figures of each configuration side by side."""
    names = list(results)
    print("[eta-accuracy] " + f"{'':58}" + "".join(f"{n[-16:]:>18}" for n in names))
    for label, key in ROWS:
        print("[eta-accuracy] " + f"{label:58}"
              + "".join(f"{results[n].get(key)!s:>18}" for n in names))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
