"""Engine benchmarks: Kueue's scheduler performance configs and the Philly trace, replayed in
simulated time through the scenario runner (the same engine the workers use).

    python -m bench.engine                 # everything (a few minutes at most)
    python -m bench.engine kueue           # only the Kueue baseline (15,000 workloads)
    python -m bench.engine kueue-large     # only the 1,000-queue, 50,000-workload variant
    python -m bench.engine philly          # only the Philly replays (elastic and static)
    python -m bench.engine philly --jobs 20000   # the first 20,000 jobs of the trace only

Each replay has a wall-clock budget (ALLOT_BENCH_BUDGET_S, default 120 s) so `make bench` stays
bounded: a replay that runs out of it is reported as such (its figures are then missing).

Prints the figures, then one line of JSON with all of them (`{"bench": "engine", ...}`).
Scenarios are generated in memory; nothing is written to the repository.

Kueue baseline: kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/generator.yaml
(5 cohorts x 6 ClusterQueues, nominalQuota 20 CPU, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority; per queue 350 small, 100 medium, 50 large workloads). The
runner there (minimalkueue, no kube-scheduler) has no nodes: capacity is the sum of the
nominal quotas, 30 x 20 = 600 CPU, so the capacity bound on the makespan is the total work
(30 x (350 x 1 x 0.2 + 100 x 5 x 0.5 + 50 x 20 x 1.0) = 39,600 CPU-s) / 600 CPU = 66 s.
Here each cohort is a department (min = max = 120 CPU: cohorts do not lend to each other) and
each ClusterQueue a leaf (min 20, max 120); the fleet is one CPU node holding the 600 cores, so
nodes never bind before quota, as in Kueue's run. Kueue's classes map to priority classes that
may preempt (withinClusterQueue LowerPriority); grace 0 and no reclaim cooldown (Kueue has
neither).

Philly: Microsoft Philly trace (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters
for DNN Training Workloads", USENIX ATC'19), per-job summary philly_pollux_jobs.csv from
petuum/adaptdl (osdi21-artifact, simulator/traces/philly.csv), CC BY 4.0 (msr-fiddle/philly-
traces). 15 virtual clusters become 15 leaf queues with min in proportion to their GPU-hours;
the fleet is 1.3 x the mean demand (GPU-seconds / submission span), in 8-GPU nodes.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from scheduling.replay import load_scenario, run_scenario

CPU = "cpu"
PHILLY_FLAVOR = "gpu-24g"
PHILLY_NODE_GPUS = 8
TRACE_FILE = "philly_pollux_jobs.csv"
TRACE_CITATION = (
    "Microsoft Philly trace (Jeon et al., USENIX ATC'19), philly_pollux_jobs.csv from "
    "petuum/adaptdl osdi21-artifact, CC BY 4.0"
)
KUEUE_SOURCE = "kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/generator.yaml"

# Kueue's baseline workload sets per ClusterQueue: (class, count, interval s, runtime s, cpu, prio)
KUEUE_SETS = (
    ("small", 350, 0.1, 0.2, 1, 50),
    ("medium", 100, 0.5, 0.5, 5, 100),
    ("large", 50, 1.2, 1.0, 20, 200),
)
NOMINAL = 20
BORROWING_LIMIT = 100


class BudgetExceeded(Exception):
    """A replay ran longer than its wall-clock budget."""


def _budget_s() -> float:
    return float(os.environ.get("ALLOT_BENCH_BUDGET_S", "120"))


def run_with_budget(scenario: Any) -> dict[str, Any]:
    """run_scenario, interrupted (BudgetExceeded) after the wall-clock budget."""

    def expired(_signum: int, _frame: Any) -> None:
        raise BudgetExceeded

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, _budget_s())
    try:
        return run_scenario(scenario)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def traces_dir() -> Path:
    """Where the public traces live: ALLOT_TRACES_DIR, else ../shared/traces next to the repo."""
    override = os.environ.get("ALLOT_TRACES_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "shared" / "traces"


# ---------------------------------------------------------------------------- Kueue


def kueue_scenario(cohorts: int, queues_per_cohort: int, scale: float = 1.0) -> dict[str, Any]:
    """Kueue's scheduler performance config as a scenario; `scale` divides the per-queue counts."""
    queues = []
    workloads = []
    for c in range(cohorts):
        children = []
        for q in range(queues_per_cohort):
            leaf = f"cq-{c}-{q}"
            children.append({"name": leaf, "quota": {CPU: {"cpu": {
                "min": NOMINAL, "max": NOMINAL + BORROWING_LIMIT}}}})
            for cls, count, interval, runtime, cpu, _prio in KUEUE_SETS:
                for i in range(round(count * scale)):
                    workloads.append({
                        "name": f"{leaf}-{cls}-{i}", "queue": leaf,
                        "submit_at": round(i * interval, 3), "duration_s": runtime,
                        "priority_class": cls, "termination_grace_s": 0,
                        "pods": [{"count": 1, "flavors": [CPU], "gpus": 0, "cpu": cpu,
                                  "memory_gib": 1}],
                    })
        cohort_cpu = NOMINAL * queues_per_cohort
        queues.append({"name": f"cohort-{c}",
                       "quota": {CPU: {"cpu": {"min": cohort_cpu, "max": cohort_cpu}}},
                       "children": children})
    total_cpu = NOMINAL * queues_per_cohort * cohorts
    return {
        "name": f"kueue-perf-{cohorts}x{queues_per_cohort}",
        "until": 100_000,
        "settings": {"reclaim_cooldown_s": 0, "cycle_interval_s": 1},
        "flavors": [{"name": CPU}],
        "priority_classes": [{"name": cls, "value": prio, "can_preempt": True}
                             for cls, *_rest, prio in KUEUE_SETS],
        "clusters": [{"name": "perf", "nodes": [{"count": 1, "flavor": CPU, "cpu": total_cpu,
                                                 "memory_gib": 10 * len(workloads) + 1}]}],
        "queues": queues,
        "workloads": workloads,
    }


def capacity_bound(scenario: dict[str, Any]) -> float:
    """Total CPU-seconds of work / total CPU: no schedule can finish earlier."""
    work = sum(w["duration_s"] * p["count"] * p["cpu"]
               for w in scenario["workloads"] for p in w["pods"])
    cap = sum(n["count"] * n["cpu"] for c in scenario["clusters"] for n in c["nodes"])
    return work / cap


def run_kueue(label: str, cohorts: int, per_cohort: int, scale: float) -> dict[str, Any]:
    data = kueue_scenario(cohorts, per_cohort, scale)
    n = len(data["workloads"])
    c0 = time.process_time()
    t0 = time.perf_counter()
    scenario = load_scenario(data)
    t1 = time.perf_counter()
    try:
        result = run_with_budget(scenario)
    except BudgetExceeded:
        print(f"[{label}] {n} workloads: not finished within the {_budget_s():.0f} s budget")
        return {"workloads": n, "budget_exceeded_s": _budget_s()}
    t2 = time.perf_counter()
    wls = result["workloads"].values()
    finished = [w for w in wls if w["state"] == "finished"]
    makespan = max((w["finished_at"] for w in finished), default=float("nan"))
    bound = capacity_bound(data)
    admissions = sum(len(w["admissions"]) for w in wls)
    preemptions = sum(len(w["preemptions"]) for w in wls)
    waits: dict[str, list[float]] = defaultdict(list)
    submit = {w["name"]: w["submit_at"] for w in data["workloads"]}
    for name, w in result["workloads"].items():
        if w["admissions"]:
            waits[name.rsplit("-", 2)[-2]].append(w["admissions"][0]["at"] - submit[name])
    wall = t2 - t0
    out = {
        "workloads": n,
        "queues": cohorts * per_cohort,
        "finished": len(finished),
        "makespan_s": round(makespan, 3),
        "capacity_bound_s": round(bound, 3),
        "makespan_over_bound": round(makespan / bound, 4),
        "admissions": admissions,
        "preemptions": preemptions,
        "mean_time_to_admission_s": {k: round(sum(v) / len(v), 3)
                                     for k, v in sorted(waits.items())},
        "load_s": round(t1 - t0, 3),
        "run_s": round(t2 - t1, 3),
        "wall_s": round(wall, 3),
        "cpu_s": round(time.process_time() - c0, 3),
        "workloads_per_s": round(n / wall, 1),
        "decisions_per_s": round((admissions + preemptions) / wall, 1),
    }
    print(f"[{label}] {n} workloads in {cohorts * per_cohort} queues ({KUEUE_SOURCE})")
    print(f"  finished {len(finished)}/{n}; makespan {out['makespan_s']} s vs capacity bound "
          f"{out['capacity_bound_s']} s (x{out['makespan_over_bound']}; target <= 1.10)")
    print(f"  admissions {admissions}, preemptions {preemptions}; mean time to admission "
          f"{out['mean_time_to_admission_s']}")
    print(f"  wall {out['wall_s']} s (load {out['load_s']} s, run {out['run_s']} s; CPU "
          f"{out['cpu_s']} s): "
          f"{out['workloads_per_s']} workloads/s, {out['decisions_per_s']} decisions/s "
          f"(target >= 2000)")
    return out


# ---------------------------------------------------------------------------- Philly


def read_philly(path: Path) -> list[tuple[float, float, int, str]]:
    """(submit s from the first job, duration s, GPUs, tenant) for every job, in submit order."""
    rows = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if not row.get("timestamp"):
                continue
            # The trace's clock has no zone; reading it as UTC keeps the gaps exact.
            ts = datetime.strptime(row["timestamp"] + " +0000", "%Y-%m-%d %H:%M:%S %z").timestamp()
            rows.append((ts, float(row["duration"]), int(row["num_gpus"]), row["cluster"]))
    rows.sort()
    t0 = rows[0][0]
    return [(ts - t0, dur, g, tenant) for ts, dur, g, tenant in rows]


def _split(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Integers in proportion to the weights that add up to `total` (largest remainder)."""
    wsum = sum(weights.values())
    exact = {k: total * w / wsum for k, w in weights.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    rest = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[:rest]:
        out[k] += 1
    return out


def philly_scenario(jobs: list[tuple[float, float, int, str]], *, elastic: bool,
                    fleet_factor: float = 1.3) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trace as a scenario: tenants as leaves, min by GPU-hours, fleet = factor x mean."""
    span = jobs[-1][0] - jobs[0][0]
    gpu_seconds = sum(d * g for _s, d, g, _t in jobs)
    mean_demand = gpu_seconds / span
    nodes = math.ceil(fleet_factor * mean_demand / PHILLY_NODE_GPUS)
    fleet = nodes * PHILLY_NODE_GPUS
    by_tenant: dict[str, float] = defaultdict(float)
    for _s, d, g, tenant in jobs:
        by_tenant[tenant] += d * g
    mins = _split(fleet, by_tenant)
    tenants = sorted(by_tenant)
    queues = [{"name": f"vc-{t}", "quota": {PHILLY_FLAVOR: {"gpu": {
        "min": mins[t], "max": fleet if elastic else mins[t]}}}} for t in tenants]
    workloads = []
    for i, (submit, dur, g, tenant) in enumerate(jobs):
        pods = []
        if g >= PHILLY_NODE_GPUS:
            pods.append({"count": g // PHILLY_NODE_GPUS, "flavors": [PHILLY_FLAVOR],
                         "gpus": PHILLY_NODE_GPUS, "cpu": 4 * PHILLY_NODE_GPUS,
                         "memory_gib": 64})
        if g % PHILLY_NODE_GPUS:
            rest = g % PHILLY_NODE_GPUS
            pods.append({"count": 1, "flavors": [PHILLY_FLAVOR], "gpus": rest,
                         "cpu": 4 * rest, "memory_gib": 8 * rest})
        workloads.append({"name": f"j{i}", "queue": f"vc-{tenant}", "submit_at": submit,
                          "duration_s": max(dur, 1.0), "pods": pods})
    until = math.ceil(jobs[-1][0] + 2 * 86_400)
    data = {
        "name": f"philly-{'elastic' if elastic else 'static'}",
        "until": until,
        "settings": {"cycle_interval_s": 60},
        "flavors": [{"name": PHILLY_FLAVOR, "gpu_memory_gib": 24}],
        "clusters": [{"name": "philly", "nodes": [{
            "count": nodes, "flavor": PHILLY_FLAVOR, "gpus": PHILLY_NODE_GPUS,
            "cpu": 4 * PHILLY_NODE_GPUS + 8, "memory_gib": 64 * PHILLY_NODE_GPUS}]}],
        "queues": queues,
        "workloads": workloads,
    }
    facts = {"jobs": len(jobs), "tenants": len(tenants), "span_days": round(span / 86_400, 1),
             "gpu_hours": round(gpu_seconds / 3600), "mean_demand_gpus": round(mean_demand, 1),
             "fleet_gpus": fleet, "until_s": until}
    return data, facts


def run_philly(jobs: list[tuple[float, float, int, str]], elastic: bool) -> dict[str, Any]:
    label = "elastic" if elastic else "static"
    data, facts = philly_scenario(jobs, elastic=elastic)
    c0 = time.process_time()
    t0 = time.perf_counter()
    scenario = load_scenario(data)
    t1 = time.perf_counter()
    try:
        result = run_with_budget(scenario)
    except BudgetExceeded:
        print(f"[philly {label}] {facts['jobs']} jobs: not finished within the "
              f"{_budget_s():.0f} s budget (target < 60 s)")
        return {**facts, "budget_exceeded_s": _budget_s()}
    t2 = time.perf_counter()
    m = result["metrics"]
    states: dict[str, int] = defaultdict(int)
    for w in result["workloads"].values():
        states[w["state"]] += 1
    out = {
        **facts,
        "demand_bounded_allocation_rate": round(m["demand_bounded_allocation_rate"], 4),
        "gpu_allocation_rate": round(m["gpu_allocation_rate"], 4),
        "mean_wait_s": round(m["mean_wait_s"], 1),
        "p95_wait_s": round(m["p95_wait_s"], 1),
        "jain_fairness": round(m["jain_fairness"], 4),
        "min_guarantee_violation_s": m["min_guarantee_violation_s"],
        "preemptions": m["preemptions"],
        "states": dict(sorted(states.items())),
        "load_s": round(t1 - t0, 2),
        "run_s": round(t2 - t1, 2),
        "wall_s": round(t2 - t0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
    }
    print(f"[philly {label}] {facts['jobs']} jobs, {facts['tenants']} tenants, "
          f"{facts['span_days']} days, fleet {facts['fleet_gpus']} GPUs "
          f"(1.3 x mean demand {facts['mean_demand_gpus']})")
    print(f"  demand-bounded allocation {out['demand_bounded_allocation_rate']} (target >= 0.95), "
          f"allocation {out['gpu_allocation_rate']}, p95 wait {out['p95_wait_s']} s, "
          f"mean wait {out['mean_wait_s']} s")
    print(f"  Jain {out['jain_fairness']}, Min-guarantee violation "
          f"{out['min_guarantee_violation_s']} s (target 0), preemptions {out['preemptions']}, "
          f"states {out['states']}")
    print(f"  wall {out['wall_s']} s (load {out['load_s']} s, run {out['run_s']} s; CPU "
          f"{out['cpu_s']} s; target < 60 s)")
    return out


MIN_VIOLATION = (
    "Min violation: a leaf has pending work within its guarantee, uses less than its min, "
    "no reclaim is under way for it, and the work would fit if the other leaves gave back "
    "what they borrow; only the part of such an episode beyond one grace period plus one "
    "cycle counts (time during which some leaf is in one)"
)


def print_philly_table(elastic: dict[str, Any], static: dict[str, Any]) -> None:
    """Elastic Min/Max side by side with static quotas (max = min)."""
    rows = (
        ("wall time of the replay (s)", "wall_s", "< 60"),
        ("demand-bounded allocation", "demand_bounded_allocation_rate", ">= 0.95"),
        ("p95 wait (s)", "p95_wait_s", ""),
        ("Jain fairness (allocation / min)", "jain_fairness", ""),
        ("Min-guarantee violations (s)", "min_guarantee_violation_s", "0"),
        ("preemptions", "preemptions", ""),
    )
    print(f"[philly] {'':34} {'elastic':>12} {'static':>12}  target (elastic)")
    for label, key, target in rows:
        cells = [str(fig.get(key, "over budget")) for fig in (elastic, static)]
        print(f"[philly] {label:34} {cells[0]:>12} {cells[1]:>12}  {target}")
    print(f"[philly] {MIN_VIOLATION}")


# ---------------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    limit = None
    if "--jobs" in argv:
        i = argv.index("--jobs")
        limit = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    which = set(argv) or {"kueue", "kueue-large", "philly"}
    figures: dict[str, Any] = {"bench": "engine"}
    if "kueue" in which:
        figures["kueue_baseline"] = run_kueue("kueue baseline", 5, 6, 1.0)
    if "kueue-large" in which:
        # Same shape, 1,000 queues (100 cohorts x 10) with a tenth of the per-queue counts
        # (35 small, 10 medium, 5 large): 50,000 workloads.
        figures["kueue_1000_queues"] = run_kueue("kueue 1000 queues", 100, 10, 0.1)
    if "philly" in which:
        path = traces_dir() / TRACE_FILE
        if not path.exists():
            print(f"[philly] skipped: {path} not found (set ALLOT_TRACES_DIR)")
        else:
            t0 = time.perf_counter()
            jobs = read_philly(path)[:limit]
            read_s = time.perf_counter() - t0
            print(f"[philly] {TRACE_CITATION}; read {len(jobs)} jobs in {read_s:.2f} s")
            figures["philly_source"] = TRACE_CITATION
            figures["philly_read_s"] = round(read_s, 2)
            figures["philly_elastic"] = run_philly(jobs, elastic=True)
            figures["philly_static"] = run_philly(jobs, elastic=False)
            print_philly_table(figures["philly_elastic"], figures["philly_static"])
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
