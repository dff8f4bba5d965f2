"""A what-if replayed twice, the future as it stands and the future with the changes, and
the two summed up side by side: waits per queue, allocation, preemptions, guarantees, cost."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from scheduling.replay.loader import load_scenario
from scheduling.replay.runner import Runner, run_scenario
from scheduling.replay.scenario import Scenario

Progress = Callable[[float], None]


class ProgressRunner(Runner):
    """A runner that reports how far through simulated time it is, every `every` cycles (the
    what-if's and the trace replay's progress bars)."""

    def __init__(self, sc: Scenario, report: Progress, every: int = 500) -> None:
        super().__init__(sc)
        self.report = report
        self.every = every
        self.cycles = 0

    def _cycle(self, t: float) -> None:
        super()._cycle(t)
        self.cycles += 1
        if self.cycles % self.every == 0 and self.sc.until > 0:
            self.report(min(1.0, t / self.sc.until))


def _replay(sc: Scenario, report: Progress | None) -> dict[str, Any]:
    if report is None:
        return run_scenario(sc)
    return ProgressRunner(sc, report).run()


def summary(sc: Scenario, out: dict[str, Any]) -> dict[str, Any]:
    """The figures a what-if compares, from one replay's output."""
    paths = {w.spec.name: w.spec.queue for w in sc.workloads}
    submitted = {w.spec.name: w.spec.submitted_at for w in sc.workloads}
    price = {c.name: c.price for c in sc.clusters}
    gpus = {w.spec.name: sum(p.count * p.gpus for p in w.spec.pod_sets) for w in sc.workloads}
    waits: dict[str, list[float]] = defaultdict(list)
    waiting: dict[str, int] = defaultdict(int)
    gpu_hours = cost = 0.0
    for name, w in out["workloads"].items():
        q = paths[name]
        if w["admissions"]:
            waits[q].append(w["admissions"][0]["at"] - submitted[name])
        elif w["state"] == "pending":
            waiting[q] += 1
        stops = sorted([p["at"] for p in w["preemptions"]]
                       + ([w["finished_at"]] if w["finished_at"] is not None else []))
        for adm in w["admissions"]:
            end = next((s for s in stops if s >= adm["at"]), sc.until)
            hours = gpus[name] * max(0.0, end - adm["at"]) / 3600
            gpu_hours += hours
            cost += hours * price.get(adm["cluster"], 1.0)
    queues = {}
    for q in sorted(set(waits) | set(waiting)):
        ws = sorted(waits[q])
        queues[q] = {
            "admitted": len(ws), "still_waiting": waiting[q],
            "mean_wait_s": round(sum(ws) / len(ws), 1) if ws else None,
            "p95_wait_s": round(ws[max(0, math.ceil(0.95 * len(ws)) - 1)], 1) if ws else None,
        }
    m = out["metrics"]
    return {
        "queues": queues,
        "gpu_allocation_rate": m["gpu_allocation_rate"],
        "mean_wait_s": m["mean_wait_s"], "p95_wait_s": m["p95_wait_s"],
        "preemptions": m["preemptions"],
        "min_guarantee_violation_s": m["min_guarantee_violation_s"],
        "guarantees_met": m["min_guarantee_violation_s"] == 0,
        "gpu_hours": round(gpu_hours, 1),
        "cost": round(cost, 1),
    }


def compare(base: dict[str, Any], changed: dict[str, Any],
            progress: Progress | None = None) -> dict[str, Any]:
    """Both replays, summed up: {"baseline": ..., "changed": ...}. `progress` gets 0..1."""
    out: dict[str, Any] = {}
    for i, (label, doc) in enumerate((("baseline", base), ("changed", changed))):
        sc = load_scenario(doc)

        def report(frac: float, i: int = i) -> None:
            if progress is not None:
                progress((i + frac) / 2)

        out[label] = summary(sc, _replay(sc, report if progress else None))
        report(1.0)
    return out
