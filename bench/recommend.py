"""Min/Max recommendations on the Philly trace: their replayed effect against static quotas.

    python -m bench.recommend          # derive from days 20-34; replay them, then days 34-41
    python -m bench.recommend --from-day 40 --days 14 --holdout-days 7
    python -m bench.recommend --min-percentile 50 --max-percentile 99

Per virtual cluster (a leaf queue), the hourly demand of a window of the trace: each job's
GPUs over the hours from its submission for its run time (what the tenant asked, as if it
started at once: the trace's offered load). The recommendations come from that with the
portal's own code (`billing.recommend.method.recommend`, docs/portal.md): min = a percentile
of the demand over the hours with demand (default the 50th), max = another (default the 95th)
but at least the tenant's largest job, the mins scaled to fit the fleet. The fleet is
bench.engine's Philly fleet for the window (1.3 x its mean demand, in 8-GPU nodes); the
static quotas are bench.engine's (min in proportion to each tenant's GPU-hours in the window,
max = min), and the elastic tree its "current" one (the same mins, max = the fleet).

Each of the three is replayed through the engine (the scenario runner) on the window itself
(in sample) and on the days after it (out of sample: the same quotas and fleet, the jobs of
tenants seen in the window). Prints p95 and mean wait, the GPU allocation rate (allocated /
installed GPU-time) and the demand-bounded one, Jain's index, Min-guarantee violations,
preemptions and the jobs never admitted, side by side; then one line of JSON.
The trace comes from ALLOT_TRACES_DIR (bench.engine's TRACE_FILE).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.engine import (
    PHILLY_FLAVOR,
    PHILLY_NODE_GPUS,
    TRACE_CITATION,
    TRACE_FILE,
    BudgetExceeded,
    _split,
    philly_scenario,
    read_philly,
    run_with_budget,
    traces_dir,
)
from billing.recommend.method import QueueHistory, recommend
from scheduling.replay import load_scenario

Job = tuple[float, float, int, str]
DAY = 86_400.0
# The trace's clock starts 2017-10-03 (read as UTC); hours are labelled from there.
EPOCH = datetime(2017, 10, 3, tzinfo=UTC)


def window(jobs: list[Job], start_day: float, days: float) -> list[Job]:
    """The jobs submitted in [start, start + days), their times from the window's start."""
    a, b = start_day * DAY, (start_day + days) * DAY
    return [(s - a, d, g, t) for s, d, g, t in jobs if a <= s < b]


def hourly_demand(jobs: list[Job], hours: int) -> dict[str, list[float]]:
    """Per tenant, the mean GPUs asked in each hour (each job from its submission, for its
    run time, cut at the window's end)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0] * hours)
    end = hours * 3600.0
    for s, d, g, tenant in jobs:
        a, b = s, min(s + d, end)
        series = out[tenant]
        while a < b:
            i = int(a // 3600)
            edge = min(b, (i + 1) * 3600.0)
            series[i] += g * (edge - a) / 3600
            a = edge
    return out


def quotas(mins: dict[str, int], maxes: dict[str, int]) -> list[dict[str, Any]]:
    return [{"name": f"vc-{t}", "quota": {PHILLY_FLAVOR: {"gpu": {"min": mins[t],
                                                                   "max": maxes[t]}}}}
            for t in sorted(mins)]


def scenario(jobs: list[Job], nodes: int, queues: list[dict[str, Any]]) -> dict[str, Any]:
    doc, _facts = philly_scenario(jobs, elastic=False)
    doc["clusters"][0]["nodes"][0]["count"] = nodes
    doc["queues"] = queues
    return doc


def replay(label: str, doc: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        out = run_with_budget(load_scenario(doc))
    except BudgetExceeded:
        print(f"[recommend] {label}: not finished within the budget (ALLOT_BENCH_BUDGET_S)")
        return {"budget_exceeded": True}
    m = out["metrics"]
    never = sum(1 for w in out["workloads"].values() if not w["admissions"])
    return {"p95_wait_s": round(m["p95_wait_s"]), "mean_wait_s": round(m["mean_wait_s"]),
            "gpu_allocation_rate": round(m["gpu_allocation_rate"], 4),
            "demand_bounded_allocation_rate": round(m["demand_bounded_allocation_rate"], 4),
            "jain_fairness": round(m["jain_fairness"], 4),
            "min_guarantee_violation_s": m["min_guarantee_violation_s"],
            "preemptions": m["preemptions"], "never_admitted": never,
            "jobs": len(doc["workloads"]), "wall_s": round(time.perf_counter() - t0, 1)}


ROWS = (("p95 wait (s)", "p95_wait_s"), ("mean wait (s)", "mean_wait_s"),
        ("GPU allocation", "gpu_allocation_rate"),
        ("demand-bounded allocation", "demand_bounded_allocation_rate"),
        ("Jain's index", "jain_fairness"), ("Min violations (s)", "min_guarantee_violation_s"),
        ("preemptions", "preemptions"), ("jobs never admitted", "never_admitted"),
        ("wall time of the replay (s)", "wall_s"))
SIDES = ("static", "elastic", "recommended")


def table(title: str, figs: dict[str, dict[str, Any]]) -> None:
    print(f"[recommend] {title}")
    print(f"[recommend]   {'':30}" + "".join(f"{s:>14}" for s in SIDES))
    for label, key in ROWS:
        print(f"[recommend]   {label:30}" + "".join(
            f"{figs[s].get(key, 'over budget')!s:>14}" for s in SIDES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-day", type=float, default=20)
    parser.add_argument("--days", type=float, default=14)
    parser.add_argument("--holdout-days", type=float, default=7)
    parser.add_argument("--min-percentile", type=float, default=50)
    parser.add_argument("--max-percentile", type=float, default=95)
    args = parser.parse_args(argv)
    path = traces_dir() / TRACE_FILE
    if not path.exists():
        print(f"[recommend] skipped: {path} not found (set ALLOT_TRACES_DIR)")
        return 0
    started = time.perf_counter()
    trace = read_philly(path)
    derive = window(trace, args.from_day, args.days)
    hours = math.ceil(args.days * 24)
    demand = hourly_demand(derive, hours)
    span = args.days * DAY
    mean_demand = sum(d * g for _s, d, g, _t in derive) / span
    nodes = math.ceil(1.3 * mean_demand / PHILLY_NODE_GPUS)
    fleet = nodes * PHILLY_NODE_GPUS
    gpu_hours = defaultdict(float)
    for _s, d, g, t in derive:
        gpu_hours[t] += d * g
    static_min = _split(fleet, dict(gpu_hours))
    labels = [EPOCH + timedelta(days=args.from_day, hours=i) for i in range(hours)]
    largest: dict[str, float] = defaultdict(float)
    for _s, _d, g, t in derive:
        largest[t] = max(largest[t], g)
    recs = recommend([QueueHistory(t, demand[t], demand[t], static_min[t], None,
                                   largest_job=largest[t]) for t in sorted(demand)],
                     labels, capacity=fleet, min_percentile=args.min_percentile,
                     max_percentile=args.max_percentile)
    rec_min = {r.path: r.min for r in recs}
    rec_max = {r.path: r.max if r.max is not None else fleet for r in recs}
    sides = {"static": quotas(static_min, static_min),
             "elastic": quotas(static_min, dict.fromkeys(static_min, fleet)),
             "recommended": quotas(rec_min, rec_max)}
    print(f"[recommend] {TRACE_CITATION}")
    print(f"[recommend] derived from days {args.from_day:g}-{args.from_day + args.days:g} "
          f"({len(derive)} jobs, {len(demand)} tenants); fleet {fleet} GPUs (1.3 x mean demand "
          f"{mean_demand:.1f}); min = p{args.min_percentile:g}, max = p{args.max_percentile:g} "
          "of the hourly demand over the hours with demand")
    print(f"[recommend]   {'tenant':10}{'GPU-h':>9}{'active h':>9}{'p50':>7}{'p95':>7}"
          f"{'static min=max':>16}{'rec. min':>9}{'rec. max':>9}")
    for r in recs:
        ev = r.evidence
        print(f"[recommend]   {r.path:10}{ev['demand_gpu_hours']:>9.0f}{ev['active_hours']:>9}"
              f"{ev['demand_percentiles']['50']:>7.1f}{ev['demand_percentiles']['95']:>7.1f}"
              f"{static_min[r.path]:>16}{r.min:>9}{rec_max[r.path]:>9}")
    figures: dict[str, Any] = {"bench": "recommend", "fleet_gpus": fleet,
                               "derive_jobs": len(derive), "tenants": len(demand),
                               "recommendations": {r.path: [r.min, rec_max[r.path]]
                                                   for r in recs},
                               "static_min": static_min}
    in_sample = {s: replay(f"in sample, {s}", scenario(derive, nodes, q))
                 for s, q in sides.items()}
    table(f"in sample: days {args.from_day:g}-{args.from_day + args.days:g}, "
          f"{len(derive)} jobs", in_sample)
    figures["in_sample"] = in_sample
    if args.holdout_days > 0:
        later = [j for j in window(trace, args.from_day + args.days, args.holdout_days)
                 if j[3] in static_min]
        if later:
            held = {s: replay(f"out of sample, {s}", scenario(later, nodes, q))
                    for s, q in sides.items()}
            end = args.from_day + args.days + args.holdout_days
            table(f"out of sample: days {args.from_day + args.days:g}-{end:g}, {len(later)} "
                  "jobs of the same tenants, same quotas and fleet", held)
            figures["out_of_sample"] = held
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"[recommend] wall {figures['wall_s']} s")
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
