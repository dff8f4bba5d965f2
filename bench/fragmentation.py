"""GPU fragmentation: Alibaba's openb trace filling a fleet, per placement policy.

    python -m bench.fragmentation                 # 10 seeds, every policy
    python -m bench.fragmentation --seeds 3       # fewer seeds
    python -m bench.fragmentation --policy allot  # one policy
    python -m bench.fragmentation --workload gpushare100  # the trace's all-sharing variant

The experiment of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC '23), on their artifact's data
(hkust-adsl/kubernetes-scheduler-simulator, data/csv: openb_pod_list_default.csv and
openb_node_list_gpu_node.csv, derived from alibaba/clusterdata cluster-trace-gpu-v2023): the
trace's pods arrive one after another in a seeded shuffle, topped up by sampling with
replacement until the requests reach 130% of the installed GPUs; none leaves; a pod that fits
nowhere is dropped. The GPU allocation ratio (milli-GPU placed / milli-GPU installed) at 50%,
60%, ... 130% of the installed GPUs asked is read as the artifact reads it
(experiments/analysis/merge_alloc_discrete.py): the mean of the ratios after each pod whose
arrival brings the requests to that whole percent, rounded. Published for this workload (mean of
10 seeds, at 100% / 130%): FGD 95.2 / 95.4, best fit 92.9 / 93.1.

Policies, all through the engine's node pool (`scheduling.engine.pool.Pool`):
- `round-up`: every fraction asks a whole card (what Allot did before fractions existed),
  nodes by best fit;
- `best-fit`: fractions share cards; the node and card left with the least free GPU (the
  artifact's best fit weighs the cores left too: a weaker baseline than this one);
- `fgd`: the paper's rule as its artifact runs it (pkg/simulator/plugin/fgd_score.go,
  pkg/utils/frag.go): the typical pods are the trace's most common (cores, GPU per card, cards),
  CPU-only pods included and memory left out, up to 95% of the pods; a node scores
  int(100 x sigmoid(fragment removed / 1000)), the best score wins, ties to the first node by
  name (the node list is sorted by name); among cards of equal score the artifact takes the
  lowest card number, the pool the fullest shared card, then a free one;
- `allot`: Allot's placement (what the recent requests it has seen would lose, ties to the
  tightest fit; `scheduling.engine.fragmentation`).

The traces directory comes from ALLOT_TRACES_DIR (else `shared/traces` beside the repository).
The trace's CPU and memory requests count (cores = cpu_milli / 1000, GiB = memory_mib / 1024);
no CPU is reserved per free GPU, as in the paper. Prints a table, then one line of JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

from bench.engine import traces_dir
from scheduling.engine.fragmentation import MILLI, Shape
from scheduling.engine.pool import Pod, Pool, pod_of

POD_FILE = "alibaba_openb_pod_list_{workload}.csv"
WORKLOADS = ("default", "gpushare100")
NODE_FILE = "alibaba_openb_node_list_gpu_node.csv"
POLICIES = ("round-up", "best-fit", "fgd", "allot")
MARKS = (50, 60, 70, 80, 90, 100, 110, 120, 130)
PUBLISHED = {"default": {"fgd": (95.2, 95.4), "best-fit": (92.9, 93.1)},
             "gpushare100": {"fgd": (86.6, 86.9), "best-fit": (84.6, 85.0)}}

# One trace pod: milli-GPU asked in all, GPUs per pod (a fraction or whole cards), cpu, memory.
TracePod = tuple[int, float, float, float]


def load(folder: Path, workload: str = "default"
         ) -> tuple[list[tuple[str, int, float, float]], list[TracePod]]:
    """The nodes (name, cards, cores, GiB) and the pods of one openb workload."""
    with (folder / NODE_FILE).open(newline="") as fh:
        nodes = [(r["sn"], int(r["gpu"]), int(r["cpu_milli"]) / 1000,
                  int(r["memory_mib"]) / 1024) for r in csv.DictReader(fh)]
    pods: list[TracePod] = []
    with (folder / POD_FILE.format(workload=workload)).open(newline="") as fh:
        for r in csv.DictReader(fh):
            n, milli = int(r["num_gpu"]), int(r["gpu_milli"])
            gpus: float = 0.0 if n == 0 else (milli / MILLI if milli < MILLI else float(n))
            pods.append((n * milli, gpus, int(r["cpu_milli"]) / 1000,
                         int(r["memory_mib"]) / 1024))
    return nodes, pods


def arrivals(pods: list[TracePod], installed: int, seed: int) -> list[TracePod]:
    """The trace shuffled, topped up by sampling with replacement to 130% of `installed`."""
    rng = random.Random(seed)
    seq = list(pods)
    rng.shuffle(seq)
    asked = sum(p[0] for p in seq)
    while asked < installed * MARKS[-1] / 100:
        p = rng.choice(pods)
        seq.append(p)
        asked += p[0]
    return seq


def build(nodes: list[tuple[str, int, float, float]], policy: str,
          pods: list[TracePod]) -> Pool:
    pool = Pool("openb", "gpu")
    for name, gpus, cpu, mem in nodes:
        pool.add_node(name, gpus, cpu, mem, "", True)
    pool.build_index()
    if policy == "best-fit":
        pool.policy = "bestfit"
    elif policy == "fgd":
        pool.policy = "fgd"
        pool.mix.set_shares(typical(pods), every=True)
    return pool


def typical(pods: list[TracePod], threshold: float = 95.0) -> dict[Shape, float]:
    """FGD's typical pods as the artifact counts them: the trace's pods by (cores, GPU per card,
    cards), CPU-only pods too and memory left out, most common first (ties: the larger shape
    first), as many as make up `threshold` percent of the pods, with their counts."""
    counts: Counter[tuple[float, int, int]] = Counter()
    for _milli, gpus, cpu, _mem in pods:
        per_card = 0 if gpus <= 0 else (int(round(gpus * MILLI)) if gpus < 1 else MILLI)
        counts[(cpu, per_card, math.ceil(gpus))] += 1
    ranked = sorted(counts.items(), key=lambda t: (t[1], t[0]), reverse=True)
    out: dict[Shape, float] = {}
    taken = 0
    for (cpu, per_card, cards), n in ranked:
        if taken >= threshold * len(pods) / 100:
            break
        out[(per_card if cards <= 1 else cards * MILLI, cpu, 0.0, -1.0)] = n
        taken += n
    return out


def replay(nodes: list[tuple[str, int, float, float]], pods: list[TracePod],
           seq: list[TracePod], policy: str) -> tuple[list[float], float]:
    """GPU allocation ratio (%) at each mark, and the wall time of the replay."""
    pool = build(nodes, policy, pods)
    installed = sum(n[1] for n in nodes) * MILLI
    # Per whole percent of arrivals: the allocation ratios seen after each pod.
    seen: dict[int, list[float]] = {}
    asked = placed = 0
    started = time.perf_counter()
    for milli, gpus, cpu, mem in seq:
        g = math.ceil(gpus) if policy == "round-up" else gpus
        pod: Pod = pod_of(g, cpu, mem)
        if policy == "allot" and gpus > 0:
            pool.mix.record((int(gpus * MILLI), cpu, mem, -1.0))
        if pool.place([pod], False, 0.0, None) is not None:
            placed += milli
        asked += milli
        seen.setdefault(round(100.0 * asked / installed), []).append(100.0 * placed / installed)
    return [at_mark(seen, m) for m in MARKS], time.perf_counter() - started


def at_mark(seen: dict[int, list[float]], mark: int) -> float:
    """The allocation ratio at `mark` percent of arrivals as the artifact reads it: the mean
    over the pods after which the arrivals round to `mark`, else to a neighbouring percent."""
    got = seen.get(mark) or [v for m in (mark - 1, mark, mark + 1) for v in seen.get(m, [])]
    if not got:
        raise ValueError(f"no arrivals near {mark}% of the installed GPUs")
    return sum(got) / len(got)


def spread(values: list[float]) -> dict[str, float]:
    """Mean, min, max and sample standard deviation, rounded to 2 places."""
    mean = sum(values) / len(values)
    sd = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
          if len(values) > 1 else 0.0)
    return {"mean": round(mean, 2), "min": round(min(values), 2), "max": round(max(values), 2),
            "sd": round(sd, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--policy", choices=POLICIES, action="append")
    parser.add_argument("--workload", choices=WORKLOADS, default="default")
    args = parser.parse_args(argv)
    folder = traces_dir()
    pod_file = folder / POD_FILE.format(workload=args.workload)
    if not pod_file.exists():
        print(f"[fragmentation] skipped: {pod_file} not found (set ALLOT_TRACES_DIR)")
        return 0
    nodes, pods = load(folder, args.workload)
    installed = sum(n[1] for n in nodes) * MILLI
    policies = args.policy or list(POLICIES)
    print(f"openb {args.workload}: {len(pods)} pods, {len(nodes)} nodes, "
          f"{installed // MILLI} GPUs; "
          f"{args.seeds} seeds (Weng et al., USENIX ATC '23; alibaba/clusterdata)")
    print(f"{'policy':10} " + " ".join(f"{m:>6}%" for m in MARKS) + "   wall s")
    figures: dict[str, dict[str, object]] = {}
    per_seed: dict[str, list[list[float]]] = {}
    for policy in policies:
        curves: list[list[float]] = []
        wall = 0.0
        for seed in range(args.seeds):
            curve, took = replay(nodes, pods, arrivals(pods, installed, seed), policy)
            curves.append(curve)
            wall += took
        mean = [sum(c[k] for c in curves) / len(curves) for k in range(len(MARKS))]
        print(f"{policy:10} " + " ".join(f"{v:7.2f}" for v in mean)
              + f"   {wall / args.seeds:6.1f}")
        per_seed[policy] = curves
        figures[policy] = {"ratio": dict(zip((str(m) for m in MARKS), (round(v, 2) for v in mean),
                                             strict=True)),
                           "spread": {str(m): spread([c[MARKS.index(m)] for c in curves])
                                      for m in (100, 130)},
                           "wall_s_per_replay": round(wall / args.seeds, 2)}
    print("spread over seeds at 100% and 130% (min..max, standard deviation):")
    for policy in policies:
        parts = [f"{m}%: {s['min']:.2f}..{s['max']:.2f} (sd {s['sd']:.2f})"
                 for m, s in ((m, figures[policy]["spread"][str(m)])  # type: ignore[index]
                              for m in (100, 130))]
        print(f"  {policy:10} " + "; ".join(parts))
    if "allot" in per_seed and "fgd" in per_seed:
        # Same seeds, same arrivals: the paired difference is the fair comparison.
        for m in (100, 130):
            k = MARKS.index(m)
            diffs = [a[k] - f[k] for a, f in zip(per_seed["allot"], per_seed["fgd"],
                                                  strict=True)]
            s = spread(diffs)
            wins = sum(d > 0 for d in diffs)
            print(f"allot - fgd at {m}%: mean {s['mean']:+.2f} points, "
                  f"{s['min']:+.2f}..{s['max']:+.2f}, above on {wins} of {len(diffs)} seeds")
            figures.setdefault("allot_minus_fgd", {})[str(m)] = {**s, "seeds_above": wins}
    for policy, (at100, at130) in PUBLISHED[args.workload].items():
        print(f"published {policy}: {at100} / {at130}")
    print(json.dumps({"bench": "fragmentation", "workload": args.workload, "seeds": args.seeds,
                      "figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
