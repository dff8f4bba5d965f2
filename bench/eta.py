"""Start forecast: how long the forecast of every pending workload takes (the engine part of
the task `scheduling.eta_refresh`: three fast-forwards of the live snapshot: the start, and
the range at the 25th and 95th percentiles of run times).

    python -m bench.eta                    # 20,000 pending workloads
    python -m bench.eta --pending 5000     # another size

The snapshot is built in memory (seeded): 50 leaf queues in 10 departments, 64 nodes of 8
GPUs, every GPU in use by running work (1, 2, 4 and 8 GPUs, a quarter with a duration hint),
N pending workloads of the same shapes spread over the queues, each queue with 200 past run
times drawn from a log-normal distribution (median 1 h). Prints the figures, then one line of
JSON (`{"bench": "eta", ...}`).
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

from scheduling.engine import (
    AdmittedWorkload,
    ClusterSpec,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    Snapshot,
    WorkloadSpec,
)
from scheduling.engine.forecast import (
    LEVELS,
    POINT,
    Known,
    RunTimes,
    estimate,
    fast_forward,
    run_lengths,
)

FLAVOR = "a100-80g"
KEY = (FLAVOR, "gpu")
NODES = 64
GPUS = 8
DEPTS = 10
LEAVES_PER_DEPT = 5
NOW = 1_000_000.0
# The resolution the workers use (settings.ALLOT_ETA).
STEP_S = 60.0
STEP_REL = 0.02


def world(pending: int, seed: int = 7) -> tuple[Snapshot, dict[str, Known], RunTimes]:
    """The snapshot, what is known of each workload's run, and the run-time history."""
    rng = random.Random(seed)
    fleet = NODES * GPUS
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    per_dept = fleet // DEPTS
    for d in range(DEPTS):
        dept = f"d{d}"
        queues.append(QueueSpec(dept, None, {KEY: KeyQuota(per_dept, fleet, per_dept)}))
        for i in range(LEAVES_PER_DEPT):
            leaf = f"{dept}/q{i}"
            share = per_dept // LEAVES_PER_DEPT
            queues.append(QueueSpec(leaf, dept, {KEY: KeyQuota(share, fleet, share)}))
            leaves.append(leaf)
    nodes = tuple(NodeSpec(f"n{i}", FLAVOR, GPUS, 96, 1024, f"r{i // 16}") for i in range(NODES))
    known: dict[str, Known] = {}
    admitted: list[AdmittedWorkload] = []
    seq = 0
    for i, node in enumerate(nodes):
        free = GPUS
        while free:
            g = min(free, rng.choice((1, 2, 4, 8)))
            free -= g
            seq += 1
            leaf = leaves[(i + seq) % len(leaves)]
            name = f"r{seq}"
            spec = WorkloadSpec(name, leaf, (PodSetSpec(1, (FLAVOR,), g, 4 * g, 32 * g),),
                                submitted_at=NOW - 7200)
            admitted.append(AdmittedWorkload(spec, "c", FLAVOR, (node.name,), True,
                                             NOW - 3600, admission_seq=seq))
            elapsed = rng.uniform(0, 7200)
            hint = elapsed + rng.uniform(60, 14_400) if rng.random() < 0.25 else None
            known[name] = Known(hint_s=hint, elapsed_s=elapsed)
    waiting: list[WorkloadSpec] = []
    for j in range(pending):
        g = rng.choice((1, 1, 1, 2, 4, 8))
        name = f"p{j}"
        waiting.append(WorkloadSpec(name, rng.choice(leaves),
                                    (PodSetSpec(1, (FLAVOR,), g, 4 * g, 32 * g),),
                                    submitted_at=NOW - rng.uniform(0, 86_400)))
        if rng.random() < 0.25:
            known[name] = Known(hint_s=rng.uniform(300, 14_400))
    history = {leaf: tuple(sorted(rng.lognormvariate(8.2, 1.2) for _ in range(200)))
               for leaf in leaves}
    snap = Snapshot(now=NOW, queues=tuple(queues),
                    clusters=(ClusterSpec("c", nodes),), flavors=(FlavorSpec(FLAVOR, 80),),
                    pending=tuple(waiting), admitted=tuple(admitted))
    fleet_hist = tuple(sorted(x for xs in history.values() for x in xs))
    return snap, known, RunTimes(by_queue=history, fleet=fleet_hist)


def main(argv: list[str]) -> int:
    pending = int(argv[argv.index("--pending") + 1]) if "--pending" in argv else 20_000
    snap, known, runtimes = world(pending)
    horizon = 14 * 86_400.0
    c0, t0 = time.process_time(), time.perf_counter()
    est = estimate(snap, known=known, runtimes=runtimes, horizon_s=horizon, step_s=STEP_S,
                   step_rel=STEP_REL)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    started = sum(e.start is not None for e in est.values())
    one: dict[str, Any] = {}
    remaining, durations = run_lengths(snap, known, runtimes, POINT, mean=True)
    t1 = time.perf_counter()
    fast_forward(snap, remaining=remaining, durations=durations, horizon_s=horizon,
                 step_s=STEP_S, step_rel=STEP_REL)
    one["median_run_s"] = round(time.perf_counter() - t1, 2)
    spans = sorted((e.start - NOW) / 3600 for e in est.values() if e.start is not None)
    figures = {
        "bench": "eta", "pending": pending, "admitted": len(snap.admitted),
        "gpus": NODES * GPUS, "queues": len(snap.queues),
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "fast_forwards": 1 + len(LEVELS), "one_fast_forward_s": one["median_run_s"],
        "started_within_horizon": started,
        "last_start_h": round(spans[-1], 1) if spans else None,
    }
    print(f"[eta] {pending} pending, {len(snap.admitted)} running on {NODES * GPUS} GPUs, "
          f"{len(snap.queues)} queues")
    print(f"[eta] forecast of every pending workload ({1 + len(LEVELS)} fast-forwards): "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU; one fast-forward {one['median_run_s']:.2f} s")
    print(f"[eta] {started} start within the 14-day horizon; the last at "
          f"+{figures['last_start_h']} h")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
