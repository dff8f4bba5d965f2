"""How well past runs predict the run time of the work ahead, on the Philly trace: the part of
a start forecast's error that no start rule can remove (docs/engine.md §13).

    python -m bench.runtime_predictability [--lags 0,3600,21600,86400,259200] [--blocks 1,10,50]

A wait of days behind a backlog is, to first order, the sum of the run times of the work ahead
divided by the GPUs that serve it. For every job of the trace and every block size N, the
"actual" is the sum of the run times of the tenant's next N submissions from it (it
included); the prediction is N times a statistic of the tenant's runs submitted at least
`lag` seconds before it (in a backlog as deep as the lag, nothing submitted later has run):

- `last10 mean`: the mean of the latest ten (the live forecast's start takes the mean of the
  queue's latest ten *finished* runs; these are the latest ten *submitted*, which is as good
  or better);
- `last`: the latest one alone (one job's best predictor when the lag is zero: its sibling);
- `month mean` / `month median`: over the 30 days before.

Printed per lag and block: the median of |prediction - actual| / actual (compare the target:
< 0.25 of the wait) and the share within 25%. Prints one line of JSON at the end.
"""

from __future__ import annotations

import bisect
import json
import statistics
import sys
from collections import defaultdict

from bench.engine import TRACE_FILE, read_philly, traces_dir

MONTH_S = 30 * 86400.0
MIN_RUNS = 5


def month_medians(times: list[float], runs: list[float]) -> list[float]:
    """[j]: the median of the runs of the 30 days before run j - 1 (runs[k:j]), for every j
    (a sliding sorted window)."""
    out = [0.0]
    window: list[float] = []
    k = 0
    for j in range(1, len(runs) + 1):
        bisect.insort(window, runs[j - 1])
        while times[k] < times[j - 1] - MONTH_S:
            del window[bisect.bisect_left(window, runs[k])]
            k += 1
        n = len(window)
        out.append(window[n // 2] if n % 2 else (window[n // 2 - 1] + window[n // 2]) / 2)
    return out


def predictions(times: list[float], runs: list[float], prefix: list[float],
                medians: list[float], i: int, lag: float) -> dict[str, float] | None:
    """Each predictor of one run from the tenant's runs submitted `lag` or more before run i
    (None with fewer than MIN_RUNS of them)."""
    j = bisect.bisect_right(times, times[i] - lag)
    if lag == 0:
        j = min(j, i)  # itself and later ones at the same second are not known
    if j < MIN_RUNS:
        return None
    k = bisect.bisect_left(times, times[j - 1] - MONTH_S)
    last10 = runs[max(0, j - 10):j]
    return {"last10 mean": sum(last10) / len(last10), "last": runs[j - 1],
            "month mean": (prefix[j] - prefix[k]) / (j - k), "month median": medians[j]}


def study(jobs: list[tuple[float, float, int, str]], lags: list[float],
          blocks: list[int]) -> dict[str, dict[str, dict[str, float]]]:
    by_tenant: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for t, d, _g, tenant in jobs:
        by_tenant[tenant].append((t, d))
    errors: dict[tuple[float, int, str], list[float]] = defaultdict(list)
    for xs in by_tenant.values():
        times = [t for t, _ in xs]
        runs = [d for _, d in xs]
        prefix = [0.0]
        for d in runs:
            prefix.append(prefix[-1] + d)
        medians = month_medians(times, runs)
        for i in range(len(xs)):
            for lag in lags:
                pred = predictions(times, runs, prefix, medians, i, lag)
                if pred is None:
                    continue
                for n in blocks:
                    if i + n > len(xs):
                        continue
                    actual = prefix[i + n] - prefix[i]
                    if actual <= 0:
                        continue
                    for name, per_run in pred.items():
                        errors[(lag, n, name)].append(abs(n * per_run - actual) / actual)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (lag, n, name), errs in sorted(errors.items()):
        out.setdefault(f"lag {lag:.0f} s, {n} runs", {})[name] = {
            "median": round(statistics.median(errs), 3),
            "within_25": round(sum(e < 0.25 for e in errs) / len(errs), 3), "n": len(errs)}
    return out


def main(argv: list[str]) -> int:
    def floats(flag: str, default: str) -> list[float]:
        return [float(x) for x in (argv[argv.index(flag) + 1] if flag in argv
                                   else default).split(",")]

    lags = floats("--lags", "0,3600,21600,86400,259200")
    blocks = [int(x) for x in floats("--blocks", "1,10,50")]
    path = traces_dir() / TRACE_FILE
    if not path.exists():
        print(f"[runtime-predictability] skipped: {path} not found (set ALLOT_TRACES_DIR)")
        return 0
    jobs = read_philly(path)
    out = study(jobs, lags, blocks)
    names = ("last10 mean", "last", "month mean", "month median")
    print(f"[runtime-predictability] Philly, {len(jobs)} jobs: median |predicted - actual| / "
          "actual of the sum of a tenant's next N runs (share within 25%)")
    print(f"[runtime-predictability] {'':24}" + "".join(f"{n:>20}" for n in names))
    for key, row in out.items():
        cells = "".join(f"{row[n]['median']:>11.3f} ({row[n]['within_25']:.2f})"
                        if n in row else f"{'':>20}" for n in names)
        print(f"[runtime-predictability] {key:24}{cells}")
    print(json.dumps({"bench": "runtime_predictability", "jobs": len(jobs), "figures": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
