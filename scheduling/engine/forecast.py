"""When will pending work start: the snapshot fast-forwarded through the engine itself.

`fast_forward` builds an engine from a snapshot and runs it on a simulated clock: admitted work
ends at the times it is given, admitted pending work runs for the durations it is given,
victims go back to the queue when their grace ends, and a cycle runs at every end and at every
time threshold (a cooldown or a pods-ready backoff running out, a workload starting to
starve). The start of each pending workload is the time of the cycle that admits it. New work
is what `arrivals` says comes (the live forecast: the last day's submissions again, a day, two
and three days later); without it, nothing is submitted meanwhile.

`estimate` runs it three times and gives each pending workload a start and a range: the start
with work not started yet at the mean of its queue's latest ten runs (`RunTimes.point`; the
wait behind many runs is close to their number times the mean, which heavy tails put well
above the median, and work comes in batches of alike runs) and running work's
remaining time at the 75th percentile; the range over that run and two with every run time at
the 25th and the 95th percentile (`RunTimes`; measured on the Philly replay,
bench/eta_accuracy.py). A workload with a duration hint runs for exactly that long in every
run, so work with hints gives exact starts.

Choices:
- Admitted work with no known end (no hint and no history) uses `RunTimes.default_s`.
- A running workload without a hint has been running `elapsed` seconds: its remaining time is
  the quantile of the past run times longer than `elapsed`, minus `elapsed` (conditioned on
  its age); when none is longer, `elapsed x q / (1 - q)` (the longer it ran, the longer it
  will; at the median, as long again).
- Pods become ready at once (no pods-ready timeout); a cluster stays as it is.
- Cycles run at events, not on the cycle interval: a start can be up to one interval earlier
  than the live cycle that will take it.
"""

from __future__ import annotations

import heapq
import math
import zlib
from bisect import bisect_right
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduling.engine.accounting import EPS
from scheduling.engine.engine import Engine
from scheduling.engine.types import Snapshot, WorkloadSpec

FINISH, GRACE_END, ARRIVE = 0, 1, 2
# The range: one fast-forward at each of these quantiles of run times; the start: work not
# started yet at its mean run time, running work's remaining time at quantile POINT.
LEVELS = (0.25, 0.95)
POINT = 0.75
# How many of a queue's latest finished runs the start's run times come from (`RunTimes.point`).
RECENT_RUNS = 10
# The live forecast (settings.ALLOT_ETA): one more fast-forward at the median run times, and
# the start as the median of the four fast-forwards' starts (`estimate`, start_stat="median"):
# on Philly it lowers the median error / wait from 0.537 to 0.363 (docs/engine.md).
LIVE_LEVELS = (0.25, 0.5, 0.95)
LIVE_START_STAT = "median"
# The live forecast's coming demand (settings.ALLOT_ETA["arrivals_s"], "arrivals_repeat"): the
# submissions of the last day again a day, two and three days later (`estimate(arrivals=...)`;
# docs/engine.md §13).
LIVE_ARRIVALS_S = 86400.0
LIVE_ARRIVALS_REPEAT = 3
# The live forecast's long wait (settings.ALLOT_ETA["long_wait_s"]): a start at least this far
# off moves halfway to the one with the median level's queued work at its mean (`estimate`,
# long_wait_s). Off (None): on the Philly replays corrected to decide as the workers do, it
# gained on one stretch as much as it lost over the whole trace (docs/engine.md §13).
LIVE_LONG_WAIT_S: float | None = None
# The levels a long wait's start is taken again with, chained (`estimate`): the median's (the
# p25 one too moves the figures on Philly by at most 0.003, at one more fast-forward).
CHAIN_LEVELS = (0.5,)
# How far a long wait's start moves to the chained one (`estimate`, long_weight).
LONG_WEIGHT = 0.5
# The live range (`estimate`'s free_levels and pad): the p25 fast-forward takes no new work,
# so the range's low end is the start if nothing new goes ahead, and the range is widened by
# half the resolution at each end. With run times known (hints) the four fast-forwards
# agree and the range was a point that held 39-89% of the starts on Philly, now 62-95%
# (docs/engine.md §13, "The range with hints").
LIVE_FREE_LEVELS = (0.25,)
LIVE_PAD = True


def repeated(recent: Sequence[WorkloadSpec], window_s: float, repeat: int
             ) -> list[tuple[WorkloadSpec, str]]:
    """The coming demand taken to be the recent past's: each of `recent` (the submissions of
    the last `window_s`) again `repeat` times, the k-th copy named with k tildes before the
    original's name and submitted k x `window_s` after it, with no backoff; with the
    original's name (for its hint)."""
    return [(replace(w, name=f"{'~' * k}{w.name}", submitted_at=w.submitted_at + k * window_s,
                     not_before=None, backoff_count=0), w.name)
            for w in recent for k in range(1, repeat + 1)]


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of sorted `values` (linear between ranks); NaN when empty."""
    if not values:
        return math.nan
    pos = q * (len(values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


@dataclass(frozen=True)
class RunTimes:
    """Past run times (seconds, sorted) per leaf queue and over the whole fleet.

    A queue with fewer than `min_samples` runs uses the fleet's; with fewer than that in the
    fleet too, `default_s`."""

    by_queue: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    fleet: tuple[float, ...] = ()
    default_s: float = 3600.0
    min_samples: int = 5
    # The queue's latest finished runs (the last RECENT_RUNS by end, sorted by length): the
    # start's run times when there are `min_samples` of them (`point`, `point_remaining`).
    recent: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    recent_stat: str = "mean"  # "mean" or "median" of the latest runs
    recent_running: bool = False  # running work conditioned on the latest runs too
    # The latest runs per (queue, GPUs of the workload): `point` takes them first when there
    # are `min_samples` of them (work of 8 GPUs runs differently from 1-GPU work).
    recent_by_size: Mapping[tuple[str, int], tuple[float, ...]] = field(default_factory=dict)
    # "mean": running work's remaining time for the start is E[T - age | T > age] over the
    # queue's runs (`point_remaining`); "quantile": at quantile q of them
    remaining_stat: str = "quantile"
    # a running workload older than every run of its queue: conditioned on the fleet's runs
    # longer than it when there are any (`remaining`), before the extrapolation
    tail_from_fleet: bool = False

    def samples(self, queue: str) -> tuple[tuple[float, ...], str]:
        """The samples a queue's run times are drawn from and where they come from."""
        own = self.by_queue.get(queue, ())
        if len(own) >= self.min_samples:
            return own, "queue"
        if len(self.fleet) >= self.min_samples:
            return self.fleet, "fleet"
        return (), "default"

    def total(self, queue: str, q: float) -> float:
        """A run's length at quantile q."""
        xs, _ = self.samples(queue)
        return quantile(xs, q) if xs else self.default_s

    def mean(self, queue: str) -> float:
        """The mean run time (the default without samples)."""
        xs, _ = self.samples(queue)
        return sum(xs) / len(xs) if xs else self.default_s

    def point(self, queue: str, gpus: int | None = None) -> float:
        """A run not started yet, for the start: the mean (`recent_stat`) of the queue's
        latest runs when there are `min_samples` of them (work comes in batches of alike
        runs: on Philly the mean of a queue's last ten predicts the next run's length within
        a factor 1.4 at the median, the month's mean within 1.9), else the month's mean."""
        xs = self.recent_by_size.get((queue, gpus), ()) if gpus is not None else ()
        if len(xs) < self.min_samples:
            xs = self.recent.get(queue, ())
        if len(xs) >= self.min_samples:
            return quantile(xs, 0.5) if self.recent_stat == "median" else sum(xs) / len(xs)
        return self.mean(queue)

    def point_remaining(self, queue: str, elapsed: float, q: float) -> float:
        """What is left of a running one, for the start: with `recent_running`, the mean
        (`recent_stat`) of the queue's latest runs longer than its age, minus its age; else,
        or when none is longer, over the month at quantile q (`remaining`)."""
        xs = self.recent.get(queue, ())
        if self.recent_running and len(xs) >= self.min_samples:
            i = bisect_right(xs, elapsed)
            if i < len(xs):
                longer = xs[i:]
                return (quantile(longer, 0.5) if self.recent_stat == "median"
                        else sum(longer) / len(longer)) - elapsed
        if self.remaining_stat == "mean":
            xs, _ = self.samples(queue)
            i = bisect_right(xs, elapsed)
            if i < len(xs):
                longer = xs[i:]
                return sum(longer) / len(longer) - elapsed
        return self.remaining(queue, elapsed, q)

    def remaining(self, queue: str, elapsed: float, q: float) -> float:
        """What is left of a run that has lasted `elapsed`, at quantile q (module docstring)."""
        xs, _ = self.samples(queue)
        if not xs:
            return max(self.default_s - elapsed, elapsed * q / (1 - q))
        i = bisect_right(xs, elapsed)
        if i < len(xs):
            return quantile(xs[i:], q) - elapsed
        if self.tail_from_fleet:
            i = bisect_right(self.fleet, elapsed)
            if i < len(self.fleet):
                return quantile(self.fleet[i:], q) - elapsed
        return elapsed * q / (1 - q)


@dataclass(frozen=True)
class Known:
    """What is known of one workload's run: its duration hint and progress (pending or
    admitted), how long it has run so far in its current admission (admitted, 0 if its pods
    do not run yet)."""

    hint_s: float | None = None
    progress_s: float = 0.0
    elapsed_s: float = 0.0


@dataclass
class Estimate:
    """One pending workload's forecast start (simulated seconds, the snapshot's clock):
    `start` at the median run times, `low` and `high` the earliest and latest over the levels;
    None is later than the horizon (or, for `high`, at some level)."""

    start: float | None
    low: float | None
    high: float | None
    # each fast-forward's start (the mean-run one first, then one per level): for studying
    starts: tuple[float | None, ...] = ()


def fast_forward(snap: Snapshot, *, remaining: Mapping[str, float],
                 durations: Mapping[str, float], horizon_s: float,
                 targets: Collection[str] | None = None, step_s: float = 0.0,
                 step_rel: float = 0.0, arrivals: Sequence[WorkloadSpec] = (),
                 step_at: str = "middle") -> dict[str, float]:
    """Pending workload name -> the time the engine admits it, fast-forwarding `snap` with
    admitted work ending after `remaining[name]` seconds and pending work running
    `durations[name]` once admitted (missing: never ends). Stops once every target (default:
    every pending workload) has started, or at `now + horizon_s`. `arrivals`: work submitted
    on the way, at its `submitted_at` (its run time in `durations` too).

    Resolution: the ends within `max(step_s, step_rel x (t - now))` after the next one are
    taken together, by one cycle halfway between the first and the last of them
    (`step_at="middle"`), so a start is early or late by at most half that, as often one as
    the other; `step_at="last"` (before): at the last of them, every start late by up to
    that, and the delays add up along a chain of runs (0 and 0: one cycle per distinct end,
    exact)."""
    if step_at not in ("middle", "last"):
        raise ValueError(f"step_at {step_at!r}: 'middle' or 'last'")
    eng = Engine.from_snapshot(snap)
    now = snap.now
    end_at = now + horizon_s
    want = set(eng.pending if targets is None else targets) & set(eng.pending)
    starts: dict[str, float] = {}
    heap: list[tuple[float, int, int, str, int]] = []
    token: dict[str, int] = {}
    left: dict[str, float] = {}  # preempted: what was left of its run
    run_end: dict[str, float] = {}
    seq = 0

    def push(at: float, kind: int, name: str) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (at, kind, seq, name, token.get(name, 0)))

    coming = {w.name: w for w in arrivals}
    for w in arrivals:
        push(w.submitted_at, ARRIVE, w.name)
    for a in eng.admitted.values():
        if a.grace_until is not None:
            push(a.grace_until, GRACE_END, a.name)
            left[a.name] = durations.get(a.name, math.inf)
            continue
        eng.mark_running(a.name)
        r = remaining.get(a.name)
        if r is not None and math.isfinite(r):
            run_end[a.name] = now + max(0.0, r)
            push(now + max(0.0, r), FINISH, a.name)
    t = now
    while want:
        res = eng.cycle(t)
        for adm in res.admitted:
            name = adm.workload
            if name in want:
                starts[name] = t
                want.discard(name)
            eng.mark_running(name)
            token[name] = token.get(name, 0) + 1
            d = left.pop(name, None)
            if d is None:
                d = durations.get(name, math.inf)
            if math.isfinite(d):
                run_end[name] = t + max(0.0, d)
                push(t + max(0.0, d), FINISH, name)
        for rej in res.rejected:
            want.discard(rej.workload)
        for pre in res.preempted:
            token[pre.workload] = token.get(pre.workload, 0) + 1
            end = run_end.pop(pre.workload, math.inf)
            left[pre.workload] = max(0.0, end - t)
            push(pre.grace_until, GRACE_END, pre.workload)
        if not want:
            break
        nxt = min(heap[0][0] if heap else math.inf, _next_threshold(eng, t))
        if nxt > end_at:
            break
        t = max(nxt, t)
        window = t + max(step_s, step_rel * (t - now)) + EPS
        first, taken = t, 0
        while heap and heap[0][0] <= window:
            at, kind, _, name, tok = heapq.heappop(heap)
            t = max(t, at)
            taken += 1
            if kind == ARRIVE:
                spec = coming[name]
                if not eng.check(spec):
                    eng.submit(spec)
                continue
            if tok != token.get(name, 0):
                continue
            held = eng.admitted.get(name)
            if held is None:
                continue
            if kind == FINISH:
                if held.grace_until is None:
                    eng.end(name, t)
                    run_end.pop(name, None)
            else:
                spec = held.spec
                eng.end(name, t)
                eng.submit(spec)
        if step_at == "middle" and taken > 1:
            t = (first + t) / 2  # the next cycle halfway: as early as late, on average
    return starts


def _next_threshold(eng: Engine, t: float) -> float:
    """The earliest time after t a cycle could decide differently with no end: a backoff or
    a cooldown running out, a pending workload starting to starve."""
    s = eng.settings
    nxt = math.inf
    for not_before, _ in eng.backoff[:1]:
        if not_before > t + EPS:
            nxt = min(nxt, not_before)
    for g in eng.groups.values():
        if g.members:
            st = g.members[0].spec.submitted_at + s.starvation_s
            if st >= t - EPS:
                nxt = min(nxt, st + 1e-6)
    for until in eng.cooldown.values():
        if until > t + EPS:
            nxt = min(nxt, until)
    for p in eng.pending.values():
        if p.not_before is not None and p.not_before > t + EPS:
            nxt = min(nxt, p.not_before)
    return nxt


def gpus_of(w: WorkloadSpec) -> int:
    """A workload's whole GPUs (a fraction of a card counts as one): its size class for
    `RunTimes.recent_by_size`."""
    return sum(ps.count * math.ceil(ps.gpus) for ps in w.pod_sets)


def run_lengths(snap: Snapshot, known: Mapping[str, Known], runtimes: RunTimes, q: float,
                *, mean: bool = False) -> tuple[dict[str, float], dict[str, float]]:
    """(remaining per admitted workload, duration per pending one) at quantile q: the hint
    where there is one, else the run-time history (`RunTimes`). `mean`: the start's run
    times instead (`RunTimes.point` for work not started, `RunTimes.point_remaining` for
    running work: the queue's latest runs, else the mean and quantile q)."""
    def fresh(w: WorkloadSpec) -> float:
        return runtimes.point(w.queue, gpus_of(w)) if mean else runtimes.total(w.queue, q)

    def reserved(w: WorkloadSpec) -> float:  # admitted, pods not running yet
        return runtimes.point(w.queue, gpus_of(w)) if mean and runtimes.recent.get(w.queue) \
            else runtimes.total(w.queue, q)

    def running(w: WorkloadSpec, age: float) -> float:
        return (runtimes.point_remaining(w.queue, age, q) if mean
                else runtimes.remaining(w.queue, age, q))

    return _lengths(snap, known, fresh=fresh, reserved=reserved, running=running)


def draw(name: str, seed: int) -> float:
    """A quantile in [0.02, 0.98] drawn for one workload in sample `seed`: the same for the
    same name and seed (a hash, not a random state), so a forecast is reproducible."""
    return 0.02 + 0.96 * zlib.crc32(f"{seed}:{name}".encode()) / 2**32


def sampled_lengths(snap: Snapshot, known: Mapping[str, Known], runtimes: RunTimes,
                    seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """`run_lengths` with each workload's run time drawn (`draw`) instead of one quantile for
    all: work not started at the drawn quantile of its queue's latest runs (of the month's
    with fewer than `min_samples` of them), running work's remaining time at the drawn
    quantile of the runs longer than its age. One sample of how the ends may fall: the
    earliest of many ends comes sooner than the earliest of their medians."""
    def fresh(w: WorkloadSpec) -> float:
        xs = runtimes.recent.get(w.queue, ())
        u = draw(w.name, seed)
        return quantile(xs, u) if len(xs) >= runtimes.min_samples \
            else runtimes.total(w.queue, u)

    def running(w: WorkloadSpec, age: float) -> float:
        return runtimes.remaining(w.queue, age, draw(w.name, seed))

    return _lengths(snap, known, fresh=fresh, reserved=fresh, running=running)


def _lengths(snap: Snapshot, known: Mapping[str, Known], *,
             fresh: Callable[[WorkloadSpec], float], reserved: Callable[[WorkloadSpec], float],
             running: Callable[[WorkloadSpec, float], float]
             ) -> tuple[dict[str, float], dict[str, float]]:
    """The walk of `run_lengths` and `sampled_lengths`: hints where given (less the progress
    and the time run), else `fresh` for work not started, `reserved` for admitted work whose
    pods are not running yet, `running(w, age)` for running work's remaining time; victims
    in grace run again for their whole length once readmitted."""
    remaining: dict[str, float] = {}
    for a in snap.admitted:
        k = known.get(a.workload.name, Known())
        if k.hint_s is not None:
            remaining[a.workload.name] = max(0.0, k.hint_s - k.progress_s - k.elapsed_s)
        elif k.elapsed_s > 0 or k.progress_s > 0:
            remaining[a.workload.name] = running(a.workload, k.elapsed_s + k.progress_s)
        else:
            remaining[a.workload.name] = reserved(a.workload)
    durations: dict[str, float] = {}
    for w in snap.pending:
        k = known.get(w.name, Known())
        if k.hint_s is not None:
            durations[w.name] = max(0.0, k.hint_s - k.progress_s)
        else:
            durations[w.name] = max(0.0, fresh(w) - k.progress_s)
    for a in snap.admitted:  # victims in grace run again once readmitted
        if a.grace_until is not None:
            k = known.get(a.workload.name, Known())
            durations[a.workload.name] = (
                max(0.0, k.hint_s - k.progress_s) if k.hint_s is not None
                else fresh(a.workload))
    return remaining, durations


def estimate(snap: Snapshot, *, known: Mapping[str, Known], runtimes: RunTimes,
             horizon_s: float, targets: Collection[str] | None = None,
             levels: Sequence[float] = LEVELS, point: float = POINT, step_s: float = 0.0,
             step_rel: float = 0.0, arrivals: Sequence[WorkloadSpec] = (),
             start_stat: str = "mean", extra: Sequence[tuple[float, str]] = (),
             start_levels: Collection[float] | None = None, step_at: str = "middle",
             long_wait_s: float | None = None, chain_levels: Collection[float] = CHAIN_LEVELS,
             long_weight: float = LONG_WEIGHT, free_levels: Collection[float] = (),
             pad: bool = False) -> dict[str, Estimate]:
    """Every pending workload's (or every target's) start: `start` from one fast-forward with
    the work not started yet at its mean run time and the running work's remaining time at
    quantile `point` (module docstring), the range over it and one fast-forward per level of
    the run-time distribution (`step_s`, `step_rel`: the resolution, `fast_forward`).
    `start_stat="median"`: `start` is the median of all those fast-forwards' starts instead
    (one beyond the horizon counting as latest; None if the median is); `start_levels`: of
    the mean-run one and those levels' only (None: all; the range is over all of them,
    widened to hold the start). `extra`: for studying, more start fast-forwards, each with
    running work's remaining time at (quantile, `RunTimes.remaining_stat`), or with every run
    time drawn ((seed, "sample"): `sampled_lengths`), their starts after the levels' in
    `starts` (in neither `start` nor the range).

    `long_wait_s`: a start at least that long after now moves `long_weight` of the way to the
    same start taken again with the levels in `chain_levels` chained: their work not started
    yet at its start's run time (`RunTimes.point`), only running work's remaining time at the
    level (a start beyond the horizon there leaves it as it was). A long wait is the sum of
    many runs one after another, which their mean predicts, while the median run for every
    run at once puts it too early (on Philly, waits of days forecast at two thirds of their
    length); a short one hangs on the first few ends, where the low levels are right. Halfway
    (`LONG_WEIGHT`): the chained start alone is as often late as early, and a late one can be
    off by more than the whole wait, an early one by less (docs/engine.md §13, "Long
    waits"). Those fast-forwards run only when a start is that long, for those targets only;
    their starts follow the others' in `starts`.

    `free_levels`: the levels whose fast-forward takes no new work (`arrivals` left out), so
    the range's low end holds the start if nothing new goes ahead. `pad`: the range widened
    by half the resolution at each end (a simulated cycle takes the ends within
    `max(step_s, step_rel x time ahead)` of each other, halfway between them, so a start can
    be that much early or late)."""
    def run(q: float, mean: bool, rt: RunTimes = runtimes, seed: int | None = None,
            chain: bool = False, only: Collection[str] | None = targets,
            coming: Sequence[WorkloadSpec] = arrivals) -> dict[str, float]:
        remaining, durations = (run_lengths(snap, known, rt, q, mean=mean) if seed is None
                                else sampled_lengths(snap, known, rt, seed))
        if chain:
            durations = run_lengths(snap, known, rt, q, mean=True)[1]
        for w in coming:
            k = known.get(w.name)
            durations[w.name] = (k.hint_s if k is not None and k.hint_s is not None
                                 else runtimes.point(w.queue, gpus_of(w)) if mean or chain
                                 else runtimes.total(w.queue, q))
        return fast_forward(snap, remaining=remaining, durations=durations,
                            horizon_s=horizon_s, targets=only, step_s=step_s,
                            step_rel=step_rel, arrivals=coming, step_at=step_at)

    mid = run(point, True)
    runs = [mid, *(run(q, False, coming=() if q in free_levels else arrivals)
                   for q in levels)]
    more = [run(0.5, True, seed=int(q)) if stat == "sample"
            else run(q, True, replace(runtimes, remaining_stat=stat)) for q, stat in extra]
    names = [w.name for w in snap.pending] if targets is None else list(targets)
    out: dict[str, Estimate] = {}
    picked = [0, *(i + 1 for i, q in enumerate(levels)
                   if start_levels is None or q in start_levels)]

    def start_of(got: Sequence[float | None]) -> float | None:
        chosen = [got[i] for i in picked]
        return (_mean_start(chosen) if start_stat == "average"
                else median_start(chosen) if start_stat == "median" else got[0])

    first = {n: start_of([r.get(n) for r in runs]) for n in names}
    long = {n for n, s in first.items()
            if long_wait_s is not None and s is not None and s - snap.now >= long_wait_s}
    chained = {i + 1: run(q, False, chain=True, only=long)  # level index -> its chained one
               for i, q in enumerate(levels) if q in chain_levels} if long else {}
    for name in names:
        got = [r.get(name) for r in runs]
        seen = (*got, *(r.get(name) for r in more))
        known_starts = [s for s in got if s is not None]
        start = first[name]
        if name in long:
            again = start_of([chained[i].get(name) if i in chained else x
                              for i, x in enumerate(got)])
            if start is not None and again is not None:
                start += long_weight * (again - start)
            seen = (*seen, *(chained[i].get(name) for i in sorted(chained)))
        low = min(known_starts) if known_starts else None
        high = max(known_starts) if len(known_starts) == len(got) else None
        if start is not None:  # a start outside the range (start_levels) widens it
            low = start if low is None else min(low, start)
            high = None if high is None else max(high, start)
        if pad:
            if low is not None:
                low = max(snap.now, low - _half_step(low - snap.now, step_s, step_rel))
            if high is not None:
                high += _half_step(high - snap.now, step_s, step_rel)
        out[name] = Estimate(start=start, low=low, high=high, starts=seen)
    return out


def _half_step(ahead: float, step_s: float, step_rel: float) -> float:
    """Half the resolution `ahead` seconds from now (`fast_forward`'s window)."""
    return max(step_s, step_rel * ahead) / 2


def _mean_start(starts: Sequence[float | None]) -> float | None:
    """The mean of the simulated starts; with one beyond the horizon, their median."""
    if any(x is None for x in starts):
        return median_start(starts)
    return sum(x for x in starts if x is not None) / len(starts)


def median_start(starts: Sequence[float | None]) -> float | None:
    """The median of the simulated starts, None (beyond the horizon) the latest."""
    xs = sorted((x if x is not None else math.inf) for x in starts)
    n = len(xs)
    mid = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    return mid if math.isfinite(mid) else None
