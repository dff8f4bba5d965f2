"""Start rules for the forecast, compared offline on recorded forecasts (docs/engine.md §13).

One replay per Philly stretch records every fast-forward's start of each forecast, and every
pending workload's first forecast (for the calibration's samples):

    python -m bench.eta_accuracy --jobs 10000 --every 20 --config new --all-pending \\
        --record-starts --record-drain --levels 0.25,0.5,0.95,0.75 \\
        --extra 0.5:quantile,0.25:quantile,0.5:mean --dump P
    python -m bench.eta_rules P [P2 ...]

Each fast-forward is independent of the others, so any rule over those starts gives, offline,
the figures the runner would give (the calibration too: it is computed here from the first
forecasts exactly as the runner computes it, `scheduling.engine.calibration`). The starts, in
the order recorded: `m75` (the live start fast-forward: work not started at its queue's
latest runs' mean, running work's remaining time at its conditional 75th percentile), `p25`,
`p50`, `p95`, `p75` (every run time at that quantile), `m50`, `m25` (as `m75`, running work at
its conditional median / 25th percentile), `mmean` (running work at its conditional mean).

Printed per rule and stretch: the per-workload median |start - actual| / wait over the
workloads that waited >= 10 min (target < 0.25) and the share of all forecasts whose range
held the actual start within one 60 s cycle (target >= 0.8); the range is the live one (the
earliest and latest of m75, p25, p50, p95), widened to hold a start outside it.
`--layout NAMES` names the recorded starts in their order when a replay recorded others
(e.g. `--levels 0.25,0.5,0.95 --extra 0.5:quantile`: m75,p25,p50,p95,m50); `P+Q` adds to P's
starts the ones Q recorded after its live four (`load`); `--no-calibration` skips the
calibrated rules (they need `P.new.first.json`, from `--all-pending`); `--search` prints the
best of every median of 1-5 recorded starts and of splits by forecast wait (`search`).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

from bench.eta_accuracy import WAITED_S
from scheduling.engine.calibration import Outcome, calibration
from scheduling.engine.forecast import median_start as median  # None: beyond the horizon

TOLERANCE_S = 60.0  # the Philly scenario's cycle interval, as bench.eta_accuracy reads it
SAMPLES = tuple(f"s{i}" for i in range(1, 7))
NAMES = ("m75", "p25", "p50", "p95", "p75", "m50", "m25", "mmean", *SAMPLES)
LIVE = ("m75", "p25", "p50", "p95")

Starts = dict[str, float | None]
Rule = Callable[[Starts, dict[str, Any]], float | None]


def med(*names: str) -> Rule:
    return lambda s, _: median([s[n] for n in names])


def split(short: Rule, long: Rule, limit_s: float, by: Rule | None = None) -> Rule:
    """`short` when the forecast wait (of `by`, default `long`) is under `limit_s`."""
    def rule(s: Starts, eta: dict[str, Any]) -> float | None:
        ref = (by or long)(s, eta)
        if ref is not None and ref - eta["at"] < limit_s:
            return short(s, eta)
        return long(s, eta)
    return rule


def geo(base: Rule, weight: float, rate_key: str) -> Rule:
    """The start's wait blended geometrically with the drain wait: the queue's work ahead
    (GPU-seconds at the latest runs' mean) over its mean GPUs in use (`rate_key`)."""
    def rule(s: Starts, eta: dict[str, Any]) -> float | None:
        st = base(s, eta)
        rate = eta.get(rate_key) or 0.0
        if st is None or rate <= 0 or st <= eta["at"]:
            return st
        drain = eta["ahead_gpu_s"] / rate
        if drain <= 0:
            return st
        wait = st - eta["at"]
        return eta["at"] + math.exp((1 - weight) * math.log(wait) + weight * math.log(drain))
    return rule


def geomean(*names: str) -> Rule:
    def rule(s: Starts, eta: dict[str, Any]) -> float | None:
        xs = [s[n] for n in names]
        if any(x is None for x in xs):
            return median(xs)
        waits = [max(1.0, x - eta["at"]) for x in xs if x is not None]
        return eta["at"] + math.exp(sum(map(math.log, waits)) / len(waits))
    return rule


RULES: dict[str, Rule] = {
    # the option (ALLOT_ETA_START_POINT 0.5, ALLOT_ETA_START_LEVELS 0.5,0.95): its best worst
    # case over the three stretches
    "option: median(m50, p50, p95)": med("m50", "p50", "p95"),
    "median of six sampled starts": med(*SAMPLES),
    "median of four sampled starts": med(*SAMPLES[:4]),
    "median of live four and six sampled": med(*LIVE, *SAMPLES),
    "median of live four and four sampled": med(*LIVE, *SAMPLES[:4]),
    "median(m75, p50, six sampled)": med("m75", "p50", *SAMPLES),
    "median(m50, six sampled)": med("m50", *SAMPLES),
    "median(m25, six sampled)": med("m25", *SAMPLES),
    "live: median(m75, p25, p50, p95)": med(*LIVE),
    "median(m50, p25, p50, p95)": med("m50", "p25", "p50", "p95"),
    "median(m25, p25, p50, p95)": med("m25", "p25", "p50", "p95"),
    "median(mmean, p25, p50, p95)": med("mmean", "p25", "p50", "p95"),
    "median(m50, p25, p75, p95)": med("m50", "p25", "p75", "p95"),
    "median(m75, m50, p25, p50, p95)": med("m75", "m50", "p25", "p50", "p95"),
    "median(m75, m50, p25, p95)": med("m75", "m50", "p25", "p95"),
    "median(m50, m25, p50, p95)": med("m50", "m25", "p50", "p95"),
    "m50": med("m50"),
    "m25": med("m25"),
    "mmean": med("mmean"),
    "geometric mean of live four": geomean(*LIVE),
    "geometric mean (m50, p25, p50, p95)": geomean("m50", "p25", "p50", "p95"),
}
for _h in (1, 2, 3, 6):
    for _short in ("m50", "m25", "p25"):
        RULES[f"live, {_short} when live wait < {_h} h"] = split(
            med(_short), med(*LIVE), _h * 3600.0)
        RULES[f"live, median({_short}, p25, p50, p95) when live wait < {_h} h"] = split(
            med(_short, "p25", "p50", "p95"), med(*LIVE), _h * 3600.0)
for _w in (0.25, 0.5):
    for _rk in ("used_6h", "used_24h", "in_use"):
        RULES[f"live x drain ({_rk}), weight {_w}"] = geo(med(*LIVE), _w, _rk)
        RULES[f"median(m50, p25, p50, p95) x drain ({_rk}), weight {_w}"] = geo(
            med("m50", "p25", "p50", "p95"), _w, _rk)
# calibrated: (base rule, only when the base wait is at least this long)
CALIBRATED: dict[str, tuple[str, float]] = {
    "calibrated live": ("live: median(m75, p25, p50, p95)", 0.0),
    "calibrated live, waits >= 6 h only": ("live: median(m75, p25, p50, p95)", 6 * 3600.0),
    "calibrated live, waits >= 1 day only": ("live: median(m75, p25, p50, p95)", 86400.0),
    "calibrated median(mmean, ...)": ("median(mmean, p25, p50, p95)", 0.0),
    "calibrated median(m50, ...)": ("median(m50, p25, p50, p95)", 0.0),
    "calibrated median(m50, ...), waits >= 6 h only": ("median(m50, p25, p50, p95)",
                                                        6 * 3600.0),
    "calibrated median(m50, ...), waits >= 1 day only": ("median(m50, p25, p50, p95)",
                                                          86400.0),
    "calibrated median(mmean, ...), waits >= 1 day only": ("median(mmean, p25, p50, p95)",
                                                            86400.0),
}


LAYOUT = list(NAMES)  # the recorded order; `--layout m75,p25,p50,p95,m50` for another


def starts_of(xs: Sequence[float | None]) -> Starts:
    return dict(zip(LAYOUT, xs, strict=False))


def figures(rows: list[tuple[dict[str, Any], float]], starts: list[float | None]
            ) -> tuple[float | None, float, int]:
    """(median error / wait over the waited, inside share over all, how many waited)."""
    rel: list[float] = []
    inside = 0
    for (eta, actual), start in zip(rows, starts, strict=True):
        live = [eta["starts"][i] for i in range(4)]
        known = [x for x in live if x is not None]
        low = min(known) if known else None
        high = max(known) if len(known) == len(live) else None
        if start is not None:
            low = start if low is None else min(low, start)
            high = None if high is None else max(high, start)
        inside += low is not None and low - TOLERANCE_S <= actual and (
            high is None or actual <= high + TOLERANCE_S)
        wait = actual - eta["at"]
        if start is not None and wait >= WAITED_S:
            rel.append(abs(start - actual) / wait)
    return (statistics.median(rel) if rel else None), inside / len(rows), len(rel)


def calibrated(rows: list[tuple[dict[str, Any], float]], first: list[dict[str, Any]],
               queues: list[str], base: Rule, min_wait_s: float) -> list[float | None]:
    """The runner's calibration (`EtaOptions(calibrate=True)`) over the `base` rule's starts:
    each forecast's wait scaled by its queue's factor from the first forecasts made before
    it; only when the base wait is at least `min_wait_s`."""
    firsts = sorted(first, key=lambda f: f["at"])
    made = [(f["at"], f["queue"], base(starts_of(f["starts"]), f), f["actual"]) for f in firsts]
    out: list[float | None] = []
    for (eta, _), queue in zip(rows, queues, strict=True):
        now = eta["at"]
        start = base(starts_of(eta["starts"]), eta)
        if start is None or start <= now or start - now < min_wait_s:
            out.append(start)
            continue
        by_queue: dict[str, list[Outcome]] = {}
        for at, q, s, actual in made:
            if at >= now:
                break
            if s is not None:
                by_queue.setdefault(q, []).append(Outcome(at=at, start=s, actual=actual))
        cal = calibration(by_queue, now, window_s=30 * 86400.0)
        f = cal.of(queue)
        scaled = now + (start - now) * f
        out.append(scaled if math.isfinite(scaled) else start)
    return out


def dumped_file(prefix: str) -> str:
    """`P` is the `new` configuration's dump, P.new.json; a name ending in .json is itself."""
    return prefix if prefix.endswith(".json") else f"{prefix}.new.json"


def load(spec: str) -> list[dict[str, Any]]:
    """The forecasts of `P.new.json`; `P+Q`: with the starts Q recorded after its four live
    ones (`--extra`) appended to P's (each fast-forward is independent: two replays of one
    stretch give the same live starts)."""
    first, *more = spec.split("+")
    with open(dumped_file(first)) as fh:
        dumped = [r for r in json.load(fh) if r["actual"] is not None]
    for other in more:
        with open(dumped_file(other)) as fh:
            extra = {r["name"]: r["eta"]["starts"] for r in json.load(fh)}
        for r in dumped:
            got = extra[r["name"]]
            if got[:4] != r["eta"]["starts"][:4]:
                raise SystemExit(f"{spec}: {r['name']}'s live starts differ between dumps")
            r["eta"]["starts"] = [*r["eta"]["starts"], *got[4:]]
    return dumped


def search(specs: list[str], top: int = 10) -> list[str]:
    """Every median of 1 to 5 of the recorded starts, and every split (one such median for a
    forecast wait under a limit, another above it; the wait by the live rule or by the long
    one) over the 40 best of them and the single starts: the best `top` of each by their worst
    stretch (`--search`). Printed to show what no rule of these reaches, not to pick one."""
    sets = [load(x) for x in specs]
    have = min(len(r["eta"]["starts"]) for rows in sets for r in rows)
    waited = [[(r["eta"]["at"], float(r["actual"]),
                [math.inf if x is None else x for x in r["eta"]["starts"]])
               for r in rows if r["actual"] - r["eta"]["at"] >= WAITED_S] for rows in sets]

    def mid(xs: list[float], c: tuple[int, ...]) -> float:
        ys = sorted(xs[i] for i in c)
        n = len(ys)
        return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2

    def worst(pick: Callable[[float, list[float]], float]) -> list[float]:
        out = []
        for rows in waited:
            rel = [abs(x - a) / (a - at) for at, a, xs in rows
                   if math.isfinite(x := pick(at, xs))]
            out.append(statistics.median(rel))
        return out

    def label(c: tuple[int, ...]) -> str:
        return "median(" + ", ".join(LAYOUT[i] for i in c) + ")"

    combos = [c for k in range(1, 6) for c in itertools.combinations(range(have), k)]
    ranked = sorted(((worst(lambda at, xs, c=c: mid(xs, c)), c) for c in combos),
                    key=lambda r: max(r[0]))
    lines = [f"{len(combos)} medians of 1-5 starts, the best by their worst stretch:"]
    lines += [f"  {label(c):44}" + "".join(f"{e:>8.3f}" for e in es) for es, c in ranked[:top]]
    live = tuple(LAYOUT.index(n) for n in LIVE)
    bases = list(dict.fromkeys([c for _, c in ranked[:40]] + [(i,) for i in range(have)]))
    splits = []
    for short, long_, limit, by in itertools.product(
            bases, bases, (1800, 3600, 7200, 14400, 28800, 86400, 172800), ("live", "long")):
        if short == long_:
            continue
        ref = live if by == "live" else long_

        def pick(at: float, xs: list[float], s: tuple[int, ...] = short,
                 lg: tuple[int, ...] = long_, r: tuple[int, ...] = ref,
                 t: float = limit) -> float:
            return mid(xs, s) if mid(xs, r) - at < t else mid(xs, lg)

        splits.append((worst(pick), f"{label(short)} under {limit / 3600:g} h ({by}), "
                                    f"else {label(long_)}"))
    splits.sort(key=lambda r: max(r[0]))
    lines.append(f"{len(splits)} splits by forecast wait, the best by their worst stretch:")
    lines += [f"  {name:90}" + "".join(f"{e:>8.3f}" for e in es) for es, name in splits[:top]]
    return lines


def main(argv: list[str]) -> int:
    if "--layout" in argv:
        LAYOUT[:] = argv[argv.index("--layout") + 1].split(",")
        argv = [a for a in argv if a not in ("--layout", ",".join(LAYOUT))]
    prefixes = [a for a in argv if not a.startswith("--")]
    if "--search" in argv:
        print("\n".join(search(prefixes)))
        return 0
    table: dict[str, list[str]] = {}
    for spec in prefixes:
        prefix = spec.split("+")[0]
        dumped = load(spec)
        rows = [(r["eta"], float(r["actual"])) for r in dumped]
        queues = [r["queue"] for r in dumped]
        try:
            with open(f"{prefix}.new.first.json") as fh:
                first = json.load(fh)
        except FileNotFoundError:
            first = []
        for name, rule in RULES.items():
            try:
                starts = [rule(starts_of(eta["starts"]), eta) for eta, _ in rows]
            except KeyError:  # a start this dump did not record
                continue
            err, inside, n = figures(rows, starts)
            table.setdefault(name, []).append(f"{err:.3f} ({inside:.3f}, {n})")
        if first and "--no-calibration" not in argv:
            for name, (base, min_wait) in CALIBRATED.items():
                starts = calibrated(rows, first, queues, RULES[base], min_wait)
                err, inside, n = figures(rows, starts)
                table.setdefault(name, []).append(f"{err:.3f} ({inside:.3f}, {n})")
    print(f"{'rule':62}" + "".join(f"{p[-24:]:>26}" for p in prefixes))
    for name, cells in table.items():
        if len(cells) < len(prefixes):  # a start not recorded in some dump
            continue
        print(f"{name:62}" + "".join(f"{c:>26}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
