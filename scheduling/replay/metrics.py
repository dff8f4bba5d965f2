"""The metrics of a replay, integrated over simulated time, and the output they end in.

Choices where the format is silent:
- Capacity in the metrics is the GPUs of ready nodes (healthy or not). The p95 is the
  nearest-rank percentile.
- `min_guarantee_violation_s`, precisely: a leaf is *violated* after a cycle when one of its
  pending workloads is within guarantee on its first flavor, the leaf uses less than its min,
  no reclaim is under way for the workload (no victims of it in grace), the workload does not
  fit, and it would fit if every other leaf gave back what it borrows (work in grace counted
  as gone; a starving workload's hold is not borrowing). So waiting while the fleet is full of
  in-guarantee work (others' or its own), or while its demand is above min, is not a
  violation. A reclaim needs one grace period (`termination_grace_s`) and then one cycle
  (`cycle_interval_s`), so a violated episode of a leaf counts only beyond that allowance; the
  metric is the time during which some leaf is in an episode longer than the allowance.
- Jain's index skips leaves with min 0 on GPU keys (no min-share); it is 1.0 when fewer than
  one leaf qualifies.
"""

from __future__ import annotations

import math
from typing import Any

from scheduling.engine import Engine, gpu_equivalent
from scheduling.replay.record import WorkloadRecord
from scheduling.replay.scenario import Scenario


def num(v: float) -> float | int:
    """A number as the output writes it: whole numbers as int, others to 6 decimals."""
    if float(v).is_integer():
        return int(v)
    return round(v, 6)


class Metrics:
    """The integrals behind the metrics (a base of `Runner`, which feeds them)."""

    sc: Scenario
    eng: Engine
    ws: dict[str, WorkloadRecord]
    preemption_count: int
    reserved_at: dict[str, float]  # admitted, pods not all running: admission time
    eta: Any  # the runner's EtaOptions, or None: no start forecasts recorded

    def _start_metrics(self) -> None:
        self.t_last = 0.0
        self.cap = self._ready_gpus()
        self.demand = 0.0
        self.alloc = 0.0
        self.alloc_area = 0.0
        self.cap_area = 0.0
        self.bounded_area = 0.0
        self.leaf_alloc: dict[str, float] = {}
        self.leaf_demand: set[str] = set()
        self.violation_s = 0.0
        # Leaf -> start of its current Min-violation episode (see _advance).
        self.violated_since: dict[str, float] = {}
        settings = self.sc.settings
        self.violation_allowance = settings.termination_grace_s + settings.cycle_interval_s

    def _ready_gpus(self) -> float:
        """GPUs of ready nodes, MIG slices (any extended resource with a GPU-equivalent)
        counted as their GPU-equivalents."""
        total = float(sum(
            g for c in self.eng.fleet.clusters for pool in c.pools.values()
            for g, r in zip(pool.gpus, pool.ready, strict=True) if r))
        flavors = {f.name: f for f in self.sc.flavors}
        for c in self.eng.fleet.clusters:
            for flavor, pool in c.pools.items():
                if pool.ext_cap:
                    total += sum(amount * gpu_equivalent(flavors.get(flavor), res)
                                 for res, amount in pool.ext_totals().items())
        return total

    def _advance(self, t: float) -> None:
        dt = t - self.t_last
        if dt > 0:
            self.alloc_area += self.alloc * dt
            self.cap_area += self.cap * dt
            self.bounded_area += min(self.cap, self.demand) * dt
            if self.violated_since:
                # A reclaim takes one grace period, then the next cycle admits: only the part
                # of an episode beyond that allowance counts (union over leaves).
                start = min(self.violated_since.values()) + self.violation_allowance
                if start < t:
                    self.violation_s += t - max(start, self.t_last)
            self.t_last = t

    def _alloc_end(self, w: WorkloadRecord, t: float) -> None:
        self.reserved_at.pop(w.sim.spec.name, None)
        if w.admitted_at is None:
            return
        leaf = w.sim.spec.queue
        self.leaf_alloc[leaf] = self.leaf_alloc.get(leaf, 0.0) + w.gpus * (t - w.admitted_at)
        self.alloc -= w.gpus
        w.admitted_at = None

    def _drop_demand(self, w: WorkloadRecord) -> None:
        if w.counted:
            self.demand -= w.gpus
            w.counted = False

    def _track_violations(self, t: float) -> None:
        """After a cycle at t: the leaves whose guarantee is blocked start or end an episode."""
        leaves = self.eng.violating_leaves()
        since = self.violated_since
        for leaf in [q for q in since if q not in leaves]:
            del since[leaf]
        for leaf in leaves:
            since.setdefault(leaf, t)

    def _output(self) -> dict[str, Any]:
        until = self.sc.until
        waits: list[float] = []
        workloads: dict[str, Any] = {}
        for name, w in self.ws.items():
            if w.admitted_at is not None:
                self._alloc_end(w, until)
            if w.first_admit is not None:
                waits.append(w.first_admit - w.sim.spec.submitted_at)
            workloads[name] = {
                "state": w.state,
                "admissions": w.admissions,
                "preemptions": w.preemptions,
                "finished_at": None if w.finished_at is None else num(w.finished_at),
                "reasons": [{"at": num(at), "code": code, "message": message}
                            for at, code, message in w.reasons],
            }
            if self.eta is not None:
                workloads[name]["eta_at_submit"] = None if w.eta is None else {
                    k: None if v is None else [None if x is None else num(x) for x in v]
                    if isinstance(v, list) else num(v) for k, v in w.eta.items()}
        waits.sort()
        mean_wait = sum(waits) / len(waits) if waits else 0.0
        p95 = waits[max(0, math.ceil(0.95 * len(waits)) - 1)] if waits else 0.0
        return {
            "scenario": self.sc.name,
            "workloads": workloads,
            "metrics": {
                "gpu_allocation_rate": num(self.alloc_area / self.cap_area)
                if self.cap_area > 0 else 0,
                "demand_bounded_allocation_rate": num(min(1.0, self.alloc_area
                                                          / self.bounded_area))
                if self.bounded_area > 0 else 1,
                "mean_wait_s": num(mean_wait),
                "p95_wait_s": num(p95),
                "preemptions": self.preemption_count,
                "jain_fairness": num(self._jain()),
                "min_guarantee_violation_s": num(self.violation_s),
            },
        }

    def _jain(self) -> float:
        tree = self.eng.tree
        xs = []
        for leaf in sorted(self.leaf_demand):
            q = tree.index[leaf]
            share = sum(tree.mn[q][k] for k, key in enumerate(tree.keys) if key[1] == "gpu")
            if share <= 0:
                continue
            xs.append(self.leaf_alloc.get(leaf, 0.0) / share)
        if len(xs) < 1:
            return 1.0
        sq = sum(x * x for x in xs)
        if sq <= 0:
            return 1.0
        return sum(xs) ** 2 / (len(xs) * sq)
