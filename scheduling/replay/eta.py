"""The start forecast made at each submission, as the live system makes it (`eta_at_submit`).

At a submission the runner's engine is written back as a snapshot (what the workers would read
from the database at that moment), the new workload is in it, and the forecast of
`scheduling.engine.forecast` runs on it with what the live system would know: the run times of
the runs that finished in the last `history_days` per queue (the fleet's with fewer than
`min_samples`, else `default_run_s`), how long each admitted workload has run, its progress,
and no duration hint (a scenario's `duration_s` is what really happens, not what a user said;
`hints=True` takes it as a hint). The output's workload object then has
`eta_at_submit: {at, start, low, high}` (null for a start beyond the horizon).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduling.engine import Engine, Snapshot, WorkloadSpec
from scheduling.engine.calibration import BAND, SAMPLES, Outcome, apply, calibration
from scheduling.engine.export import snapshot_of
from scheduling.engine.forecast import (
    LIVE_ARRIVALS_REPEAT,
    LIVE_ARRIVALS_S,
    LIVE_FREE_LEVELS,
    LIVE_LEVELS,
    LIVE_LONG_WAIT_S,
    LIVE_PAD,
    LIVE_START_STAT,
    LONG_WEIGHT,
    POINT,
    RECENT_RUNS,
    Known,
    RunTimes,
    estimate,
    repeated,
)
from scheduling.replay.record import WorkloadRecord


@dataclass(frozen=True)
class EtaOptions:
    """How the runner forecasts at submission; the defaults are the live system's
    (`settings.ALLOT_ETA`). `every`: forecast every Nth submission only (in submission order;
    1: all), as a forecast costs four fast-forwards of the whole fleet (five for a long wait)."""

    horizon_s: float = 14 * 86400.0
    history_days: float = 30.0
    default_run_s: float = 3600.0
    min_samples: int = 5
    step_s: float = 60.0
    step_rel: float = 0.02
    every: int = 1
    hints: bool = False
    levels: tuple[float, ...] = LIVE_LEVELS
    point: float = POINT
    # The start's run times from each queue's last `recent_runs` finished runs (0: from the
    # mean of the history, as before: the old forecast, for comparison).
    recent_runs: int = RECENT_RUNS
    recent_stat: str = "mean"
    recent_running: bool = False
    # > 0: the submissions of the last `arrivals_s` seconds come again, shifted by that much,
    # during the forecast (the coming demand taken to be the recent past's; the live one's
    # day, settings.ALLOT_ETA["arrivals_s"]; 0: no new work, as before)
    arrivals_s: float = LIVE_ARRIVALS_S
    # the recent submissions come again this many times (each `arrivals_s` after the last;
    # the live one's, settings.ALLOT_ETA["arrivals_repeat"])
    arrivals_repeat: int = LIVE_ARRIVALS_REPEAT
    # "median": the start is the median of the fast-forwards' starts (`forecast.estimate`);
    # "mean": the mean-run fast-forward's (before).
    start_stat: str = LIVE_START_STAT
    # the latest runs per queue and workload size too (`RunTimes.recent_by_size`)
    by_size: bool = False
    # running work's remaining time for the start (`RunTimes.remaining_stat`)
    remaining_stat: str = "quantile"
    # running work older than its queue's runs conditioned on the fleet's longer runs
    # (`RunTimes.tail_from_fleet`)
    tail_from_fleet: bool = False
    # where a simulated cycle taking several ends runs (`forecast.fast_forward`): "middle"
    # (the live one) or "last" (before: late by up to the resolution)
    step_at: str = "middle"
    # record each fast-forward's start too (`starts` in `eta_at_submit`): for studying
    record_starts: bool = False
    # forecast every pending workload at each forecast (as the live refresh does), so each
    # one's first forecast is known (`FirstForecasts`; on with `calibrate`)
    all_pending: bool = False
    # scale the start by how the queue's earlier first forecasts came out
    # (`scheduling.engine.calibration`; the raw forecast is kept in `eta_at_submit.raw`)
    calibrate: bool = False
    calibration_samples: int = SAMPLES
    calibration_band: float = BAND
    # the levels whose starts enter the start's median with the mean-run one (None: all;
    # `forecast.estimate`): with `point` 0.5 and (0.5, 0.95), the rule studied in
    # docs/engine.md §13, off by default
    start_levels: tuple[float, ...] | None = None
    # for studying (with `record_starts`): more start fast-forwards, running work at
    # (quantile, remaining_stat) each (`forecast.estimate`'s `extra`)
    extra: tuple[tuple[float, str], ...] = ()
    # a start at least this long after now moves `long_weight` of the way to the one with the
    # median level's work not started yet at its start's run time (`forecast.estimate`'s
    # `long_wait_s`, the live one's; None: never)
    long_wait_s: float | None = LIVE_LONG_WAIT_S
    long_weight: float = LONG_WEIGHT
    # for studying: record the queue's work ahead and recent use (`drain` in `eta_at_submit`)
    record_drain: bool = False
    # for studying: the start's run times from the queue's latest `recent_runs` *started*
    # runs, the running ones at their age plus the mean of the month's runs longer than it
    # (`recent_started`), instead of the latest finished ones
    recent_started: bool = False
    # the levels whose fast-forward takes no new work, and the range widened by half the
    # resolution at each end (`forecast.estimate`'s `free_levels`, `pad`; the live ones)
    free_levels: tuple[float, ...] = LIVE_FREE_LEVELS
    pad: bool = LIVE_PAD


class FirstForecasts:
    """Each workload's first forecast (when, the start it gave) per queue, as the live system
    keeps them (`FirstEstimate`): the calibration's samples."""

    def __init__(self) -> None:
        self.by_queue: dict[str, list[tuple[str, float, float]]] = {}
        self.seen: set[str] = set()
        # (queue, name, at, each fast-forward's start): with `record_starts`, for studying
        self.rows: list[tuple[str, str, float, tuple[float | None, ...]]] = []

    def add(self, queue: str, name: str, at: float, start: float | None,
            starts: tuple[float | None, ...] | None = None) -> None:
        if name in self.seen:
            return
        self.seen.add(name)
        if starts is not None:
            self.rows.append((queue, name, at, starts))
        if start is not None:
            self.by_queue.setdefault(queue, []).append((name, at, start))

    def outcomes(self, ws: dict[str, WorkloadRecord]) -> dict[str, list[Outcome]]:
        """Each queue's forecasts with their actual starts so far (the first admission at or
        after the forecast: work first seen pending after a preemption ran before)."""
        return {q: [Outcome(at=at, start=start, actual=_admitted(ws[name], at))
                    for name, at, start in xs] for q, xs in self.by_queue.items()}


def _admitted(w: WorkloadRecord, since: float) -> float | None:
    return next((float(a["at"]) for a in w.admissions if float(a["at"]) >= since), None)


class RunHistory:
    """Finished run times per queue (sorted), over a sliding window."""

    def __init__(self, opts: EtaOptions) -> None:
        self.opts = opts
        self.window = opts.history_days * 86400.0
        self.by_queue: dict[str, list[float]] = {}
        self.fleet: list[float] = []
        self.log: deque[tuple[float, str, float]] = deque()
        self.latest: dict[str, deque[tuple[float, float]]] = {}  # (end, run)
        self.latest_by_size: dict[tuple[str, int], deque[tuple[float, float]]] = {}
        # (start, run) of the latest finished runs, more than `recent_runs` of them: a run
        # that started later may end sooner (`recent_started`)
        self.started: dict[str, deque[tuple[float, float]]] = {}
        self._cache: RunTimes | None = None

    def add(self, queue: str, at: float, run_s: float, gpus: int | None = None) -> None:
        insort(self.by_queue.setdefault(queue, []), run_s)
        insort(self.fleet, run_s)
        self.log.append((at, queue, run_s))
        if self.opts.recent_runs > 0:
            self.latest.setdefault(queue, deque(maxlen=self.opts.recent_runs)).append((at, run_s))
            if self.opts.recent_started:
                self.started.setdefault(queue, deque(maxlen=5 * self.opts.recent_runs)).append(
                    (at - run_s, run_s))
            if self.opts.by_size and gpus is not None:
                self.latest_by_size.setdefault(
                    (queue, gpus), deque(maxlen=self.opts.recent_runs)).append((at, run_s))
        self._cache = None

    def runtimes(self, now: float) -> RunTimes:
        while self.log and self.log[0][0] < now - self.window:
            _, queue, run_s = self.log.popleft()
            xs = self.by_queue[queue]
            del xs[bisect_left(xs, run_s)]
            del self.fleet[bisect_left(self.fleet, run_s)]
            self._cache = None
        if self._cache is None:
            self._cache = RunTimes(
                by_queue={q: tuple(xs) for q, xs in self.by_queue.items()},
                fleet=tuple(self.fleet), default_s=self.opts.default_run_s,
                min_samples=self.opts.min_samples, recent_stat=self.opts.recent_stat,
                recent_running=self.opts.recent_running,
                remaining_stat=self.opts.remaining_stat,
                tail_from_fleet=self.opts.tail_from_fleet,
                recent={q: tuple(sorted(r for at, r in xs if at >= now - self.window))
                        for q, xs in self.latest.items()},
                recent_by_size={k: tuple(sorted(r for at, r in xs if at >= now - self.window))
                                for k, xs in self.latest_by_size.items()})
        return self._cache


def eta_at_submit(eng: Engine, ws: dict[str, WorkloadRecord], history: RunHistory,
                  opts: EtaOptions, name: str, now: float,
                  recent: Sequence[WorkloadSpec] = (),
                  first: FirstForecasts | None = None) -> dict[str, Any]:
    """The forecast of `name`'s start, just submitted at `now` (in the engine's pending);
    `recent`: the submissions of the last `opts.arrivals_s` (their repeat is on the way);
    `first`: where every pending workload's first forecast is kept (`opts.all_pending`),
    from which `opts.calibrate` scales the start."""
    snap = snapshot_of(eng, now)
    copies = repeated([w for w in recent if w.name != name], opts.arrivals_s,
                      opts.arrivals_repeat)
    arrivals = [copy for copy, _ in copies]
    known: dict[str, Known] = {}
    for a in snap.admitted:
        w = ws[a.workload.name]
        elapsed = now - w.run_start if w.run_start is not None else 0.0
        known[a.workload.name] = Known(hint_s=_hint(w, opts), progress_s=w.progress,
                                       elapsed_s=elapsed)
    for p in snap.pending:
        w = ws[p.name]
        known[p.name] = Known(hint_s=_hint(w, opts), progress_s=w.progress)
    for copy, of in copies:  # it runs as long as the original was said to (live: its hint)
        known[copy.name] = Known(hint_s=_hint(ws[of], opts))
    every = opts.all_pending or opts.calibrate
    runtimes = history.runtimes(now)
    if opts.recent_started:
        runtimes = recent_started(history, snap, known, runtimes, now)
    ests = estimate(snap, known=known, runtimes=runtimes, horizon_s=opts.horizon_s,
                    targets=None if every else {name}, step_s=opts.step_s,
                    step_rel=opts.step_rel, levels=opts.levels, point=opts.point,
                    arrivals=arrivals, start_stat=opts.start_stat, extra=opts.extra,
                    start_levels=opts.start_levels, step_at=opts.step_at,
                    long_wait_s=opts.long_wait_s, long_weight=opts.long_weight,
                    free_levels=opts.free_levels, pad=opts.pad)
    est = ests[name]
    out: dict[str, Any] = {}
    if opts.calibrate and first is not None:
        cal = calibration(first.outcomes(ws), now, samples=opts.calibration_samples,
                          min_samples=opts.min_samples, band=opts.calibration_band,
                          window_s=opts.history_days * 86400.0)
        f = cal.of(ws[name].sim.spec.queue)
        out["raw"] = [est.start, est.low, est.high]
        out["factor"] = f
        est = apply(est, now, f)
    if first is not None:  # after the calibration: it learns from forecasts made before
        for p in snap.pending:
            if p.name in ests:
                first.add(p.queue, p.name, now, ests[p.name].start,
                          ests[p.name].starts if opts.record_starts else None)
    out.update({"at": now, "start": est.start, "low": est.low, "high": est.high})
    if opts.record_starts:
        out["starts"] = list(est.starts)
    if opts.record_drain:
        out.update(_drain(snap, ws, history.runtimes(now), name, now))
    return out


def recent_started(history: RunHistory, snap: Snapshot, known: Mapping[str, Known],
                   runtimes: RunTimes, now: float) -> RunTimes:
    """`runtimes` with each queue's latest runs taken by start, not by end: the latest
    `recent_runs` of its finished runs (within the history window) and its running work
    together, a running one at its age plus the mean of the month's runs longer than it (as
    long again when older than all of them). The latest finished runs lean short: of the
    runs that started together, the short ones end first."""
    k = history.opts.recent_runs
    window = history.window
    by_queue: dict[str, list[tuple[float, float]]] = {
        q: [(st, r) for st, r in xs if st + r >= now - window]
        for q, xs in history.started.items()}
    for a in snap.admitted:
        age = known.get(a.workload.name, Known()).elapsed_s
        if age <= 0:
            continue
        q = a.workload.queue
        xs, _ = runtimes.samples(q)
        i = bisect_right(xs, age)
        total = sum(xs[i:]) / len(xs[i:]) if i < len(xs) else 2 * age
        by_queue.setdefault(q, []).append((now - age, total))
    recent = {q: tuple(sorted(r for _, r in sorted(xs, reverse=True)[:k]))
              for q, xs in by_queue.items()}
    return replace(runtimes, recent=recent)


def _drain(snap: Snapshot, ws: dict[str, WorkloadRecord], runtimes: RunTimes, name: str,
           now: float) -> dict[str, float]:
    """For studying a drain-rate start: the GPU-seconds of the queue's pending work ahead of
    `name` (at the start's run times), the queue's GPUs in use now and its mean GPUs in use
    over the last 1, 6 and 24 hours."""
    spec = ws[name].sim.spec
    queue = spec.queue
    ahead = 0.0
    for p in snap.pending:
        if p.queue != queue or p.name == name:
            continue
        if p.priority > spec.priority or (p.priority == spec.priority
                                          and p.submitted_at <= spec.submitted_at):
            ahead += sum(ps.count * ps.gpus for ps in p.pod_sets) * runtimes.point(queue)
    in_use = sum(sum(ps.count * ps.gpus for ps in a.workload.pod_sets)
                 for a in snap.admitted if a.workload.queue == queue)
    windows = (3600.0, 6 * 3600.0, 86400.0)
    used = [0.0, 0.0, 0.0]
    for w in ws.values():
        if w.sim.spec.queue != queue or not w.admissions:
            continue
        ends = sorted(float(p["at"]) for p in w.preemptions)
        for adm in w.admissions:
            a = float(adm["at"])
            if a > now:
                continue
            e = next((x for x in ends if x > a), w.finished_at if w.finished_at is not None
                     else now)
            e = min(e, now)
            for i, win in enumerate(windows):
                used[i] += w.gpus * max(0.0, e - max(a, now - win))
    return {"ahead_gpu_s": ahead, "gpus": ws[name].gpus, "in_use": in_use,
            "used_1h": used[0] / windows[0], "used_6h": used[1] / windows[1],
            "used_24h": used[2] / windows[2]}


def _hint(w: WorkloadRecord, opts: EtaOptions) -> float | None:
    return w.sim.duration_s if opts.hints else None
