"""The replays of a trace summed up for the planner's comparison, each over the same span
(from 0 to when the last side's work ended): the what-if's figures (`whatif.compare.summary`:
waits per queue, preemptions, guarantees, cost), the GPU allocation rate over that span
(GPU-time allocated / the fleet's GPU-time) and what the plots draw: each queue's wait
percentiles and its work never admitted (still waiting, or refused: asking more than a max),
the GPUs allocated over time, Jain's index and the share of time every guarantee was met."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from scheduling.replay.loader import load_scenario
from scheduling.replay.runner import Runner
from scheduling.replay.scenario import Scenario
from scheduling.whatif.compare import Progress, ProgressRunner, summary

BUCKETS = 96
QUANTILES = (10, 25, 50, 75, 90, 95, 99)


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile (as the replay's metrics)."""
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


def allocation_series(sc: Scenario, out: dict[str, Any], end: float) -> dict[str, Any]:
    """Mean GPUs allocated in each of `BUCKETS` equal slices of [0, end]."""
    width = max(end, 1.0) / BUCKETS
    area = [0.0] * BUCKETS
    gpus = {w.spec.name: sum(p.count * p.gpus for p in w.spec.pod_sets) for w in sc.workloads}
    for name, w in out["workloads"].items():
        stops = sorted([p["at"] for p in w["preemptions"]]
                       + ([w["finished_at"]] if w["finished_at"] is not None else []))
        for adm in w["admissions"]:
            a = float(adm["at"])
            b = min(next((s for s in stops if s >= a), end), end)
            i = int(a // width)
            while a < b and i < BUCKETS:
                edge = min(b, (i + 1) * width)
                area[i] += gpus[name] * (edge - a)
                a, i = edge, i + 1
    return {"t_h": [round((i + 0.5) * width / 3600, 3) for i in range(BUCKETS)],
            "gpus": [round(x / width, 2) for x in area]}


def replay(doc: dict[str, Any], report: Progress | None = None
           ) -> tuple[Scenario, dict[str, Any]]:
    """Replay one scenario through the engine: (the scenario loaded, the runner's output)."""
    sc = load_scenario(doc)
    runner = ProgressRunner(sc, report, every=300) if report else Runner(sc)
    return sc, runner.run()


def last_event(sc: Scenario, out: dict[str, Any]) -> float:
    """When the replay's last work ended (the run's end if some still runs), at least the last
    submission."""
    ends = [float(w["finished_at"]) for w in out["workloads"].values()
            if w["finished_at"] is not None]
    running = any(w["admissions"] and w["finished_at"] is None and w["state"] != "pending"
                  for w in out["workloads"].values())
    last = float(sc.until) if running else max(ends, default=0.0)
    return min(float(sc.until), max(last, max((w.spec.submitted_at for w in sc.workloads),
                                              default=0.0), 1.0))


def side_summary(sc: Scenario, out: dict[str, Any], end: float) -> dict[str, Any]:
    """One side summed up over [0, end] (`end`: the same for every side compared, so the
    allocation rates share their denominator)."""
    base = summary(sc, out)
    submitted = {w.spec.name: w.spec.submitted_at for w in sc.workloads}
    queue_of = {w.spec.name: w.spec.queue for w in sc.workloads}
    waits: dict[str, list[float]] = defaultdict(list)
    never: dict[str, int] = defaultdict(int)
    for name, w in out["workloads"].items():
        if w["admissions"]:
            waits[queue_of[name]].append(w["admissions"][0]["at"] - submitted[name])
        else:
            never[queue_of[name]] += 1
    for q, n in never.items():
        base["queues"].setdefault(q, {"admitted": 0, "still_waiting": 0, "mean_wait_s": None,
                                      "p95_wait_s": None})["never_admitted"] = n
    everything = sorted(x for ws in waits.values() for x in ws)
    for q, ws in waits.items():
        ws.sort()
        base["queues"].setdefault(q, {})["wait_quantiles_s"] = {
            str(k): round(percentile(ws, k), 1) for k in QUANTILES}
    fleet = sum(n.gpus for c in sc.clusters for n in c.nodes if n.ready)
    series = allocation_series(sc, out, end)
    used = sum(series["gpus"]) * end / BUCKETS
    base.update(
        wait_quantiles_s={str(k): round(percentile(everything, k), 1) for k in QUANTILES}
        if everything else {},
        allocation=series,
        gpu_allocation_rate=round(used / (fleet * end), 4) if fleet and end else 0.0,
        jain_fairness=out["metrics"]["jain_fairness"],
        guarantees_met_share=round(max(0.0, 1 - float(out["metrics"][
            "min_guarantee_violation_s"]) / end), 4) if end > 0 else 1.0,
        span_h=round(end / 3600, 2), workloads=len(sc.workloads), fleet_gpus=fleet)
    return base
