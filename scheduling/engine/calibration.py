"""Calibrating start forecasts by how the earlier ones came out.

Each workload's first forecast is kept (`Outcome`: when it was made, the start it gave, the
actual start once known). When a queue's recent forecasts have gone wrong in one direction by
a wide margin, a new forecast's wait is scaled by that much (`factor`, `apply`):

- the samples are the queue's latest `samples` forecasts that are *due* (their forecast start
  is past), chosen by that start, not by when they started: a forecast that came true early
  and one still waiting long after its start both count. Chosen by the actual start instead,
  the samples would be the waits that ended, which are the short ones: while a queue is slow,
  its late forecasts have not resolved yet, and the correction would lag;
- a sample's ratio is actual wait / forecast wait; one still waiting counts at its wait so
  far, a lower bound (so a queue whose forecasts keep passing without a start gets a factor
  above 1 before any of them starts);
- the factor is the median ratio, applied only outside the band [1 / band, band]: within it
  the forecasts are right at the median and the recent ratios are noise (on Philly they
  drift from one batch of work to the next), so scaling by them would only add error;
- a queue with fewer than `min_samples` due forecasts takes the fleet's (the latest over
  every queue); forecasts of less than `min_wait_s` are left out (their ratio is noise).

Pure: time is an argument; the live system (scheduling/workers/eta.py) reads the outcomes from
the database, the replay runner (scheduling/replay/eta.py) keeps them in memory.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduling.engine.forecast import Estimate

# The latest due forecasts per queue the factor is the median of.
SAMPLES = 30
# Ratios of actual to forecast wait within [1 / BAND, BAND] at the median: no correction.
BAND = 1.5
# Forecast waits shorter than this are no sample.
MIN_WAIT_S = 60.0


@dataclass(frozen=True)
class Outcome:
    """One workload's first forecast: made `at`, for a start at `start` (seconds, one clock);
    `actual`: when it was admitted next (None: not yet; one before `at` is no sample)."""

    at: float
    start: float
    actual: float | None = None

    def ratio(self, now: float) -> float:
        """Actual wait / forecast wait; still waiting: its wait until `now` (a lower bound)."""
        end = now if self.actual is None else min(self.actual, now)
        return (end - self.at) / (self.start - self.at)


def due(outcomes: Iterable[Outcome], now: float, *, samples: int = SAMPLES,
        min_wait_s: float = MIN_WAIT_S, window_s: float = math.inf) -> list[Outcome]:
    """The latest `samples` forecasts whose start is at or before `now` (and within
    `window_s` of it), by that start."""
    ready = sorted((o for o in outcomes if now - window_s <= o.start <= now
                    and o.start - o.at >= min_wait_s
                    and (o.actual is None or o.actual >= o.at)), key=lambda o: o.start)
    return ready[-samples:] if samples > 0 else []


def factor(outcomes: Iterable[Outcome], now: float, *, samples: int = SAMPLES,
           min_samples: int = 5, band: float = BAND, min_wait_s: float = MIN_WAIT_S,
           window_s: float = math.inf) -> float | None:
    """The median ratio of the latest due forecasts (module docstring); 1.0 within the band;
    None with fewer than `min_samples` of them."""
    if band < 1.0:
        raise ValueError(f"calibration band must be >= 1, got {band}")
    got = due(outcomes, now, samples=samples, min_wait_s=min_wait_s, window_s=window_s)
    if len(got) < max(1, min_samples):
        return None
    f = statistics.median(o.ratio(now) for o in got)
    return 1.0 if 1.0 / band < f < band else f


@dataclass(frozen=True)
class Calibration:
    """The factor per queue, and the fleet's for queues with too few samples of their own."""

    by_queue: Mapping[str, float] = field(default_factory=dict)
    fleet: float = 1.0

    def of(self, queue: str) -> float:
        """The factor for a forecast in `queue`."""
        return self.by_queue.get(queue, self.fleet)


NONE = Calibration()


def calibration(outcomes: Mapping[str, Sequence[Outcome]], now: float, *,
                samples: int = SAMPLES, min_samples: int = 5, band: float = BAND,
                min_wait_s: float = MIN_WAIT_S, window_s: float = math.inf) -> Calibration:
    """Each queue's factor from its outcomes (`factor`), the fleet's from every queue's."""
    def one(xs: Iterable[Outcome]) -> float | None:
        return factor(xs, now, samples=samples, min_samples=min_samples, band=band,
                      min_wait_s=min_wait_s, window_s=window_s)

    by_queue = {q: f for q, xs in outcomes.items() if (f := one(xs)) is not None}
    fleet = one(o for xs in outcomes.values() for o in xs)
    return Calibration(by_queue=by_queue, fleet=1.0 if fleet is None else fleet)


def apply(est: Estimate, now: float, f: float) -> Estimate:
    """`est` with its start's wait from `now` scaled by `f`, the range widened to hold it."""
    if f == 1.0 or est.start is None or est.start <= now:
        return est
    start = now + (est.start - now) * f
    if not math.isfinite(start):
        return est
    low = start if est.low is None else min(est.low, start)
    high = None if est.high is None else max(est.high, start)
    return replace(est, start=start, low=low, high=high)
