"""Calibrating start forecasts by how the earlier ones came out (hand-computed cases)."""

from __future__ import annotations

import pytest

from scheduling.engine.calibration import Outcome, apply, calibration, due, factor
from scheduling.engine.forecast import Estimate

NOW = 1000.0

# (made at, forecast start, actual start): ratio actual wait / forecast wait at NOW
LATE = [
    Outcome(0, 100, 300),      # 300 / 100 = 3.0
    Outcome(0, 200, None),     # still waiting: 1000 / 200 = 5.0 so far
    Outcome(100, 400, 250),    # started early: 150 / 300 = 0.5
    Outcome(0, 500, 1000),     # 1000 / 500 = 2.0
    Outcome(0, 600, None),     # 1000 / 600 = 1.667 so far
    Outcome(0, 2000, None),    # not due yet (its start is after NOW): no sample
    Outcome(500, 530, 900),    # a forecast wait of 30 s: no sample
    Outcome(700, 800, 600),    # admitted before the forecast (ran before a preemption)
]


def test_ratio_counts_a_wait_still_going_at_its_length_so_far():
    assert Outcome(0, 100, 300).ratio(NOW) == 3.0
    assert Outcome(0, 200, None).ratio(NOW) == 5.0
    assert Outcome(100, 400, 250).ratio(NOW) == 0.5


def test_due_samples_are_the_latest_by_forecast_start():
    assert [o.start for o in due(LATE, NOW)] == [100, 200, 400, 500, 600]
    assert [o.start for o in due(LATE, NOW, samples=3)] == [400, 500, 600]
    # only those due within the window (starts 500 and 600 within 500 s of NOW)
    assert [o.start for o in due(LATE, NOW, window_s=500)] == [500, 600]


def test_factor_is_the_median_ratio_outside_the_band():
    # ratios 3, 5, 0.5, 2, 1.667: median 2.0, outside [1/1.5, 1.5]
    assert factor(LATE, NOW) == 2.0
    # the latest three: 0.5, 2, 1.667 -> 1.667
    assert factor(LATE, NOW, samples=3, min_samples=3) == pytest.approx(1000 / 600)
    # too few due forecasts: no factor
    assert factor(LATE, NOW, samples=3) is None
    # a wider band holds 2.0: no correction
    assert factor(LATE, NOW, band=2.5) == 1.0


def test_factor_within_the_band_is_one():
    # ratios 0.8, 1.2, 1.4, 0.9, 1.1: median 1.1, inside [0.667, 1.5]
    near = [Outcome(0, 1000, 800), Outcome(0, 500, 600), Outcome(0, 500, 700),
            Outcome(0, 1000, 900), Outcome(0, 900, 990)]
    assert factor(near, NOW) == 1.0


def test_early_forecasts_shrink_the_wait():
    # every one started at a quarter of its forecast wait
    early = [Outcome(0, 400 + i, (400 + i) / 4) for i in range(5)]
    assert factor(early, NOW) == pytest.approx(0.25)


def test_band_below_one_is_refused():
    with pytest.raises(ValueError, match="band must be >= 1, got 0.5"):
        factor(LATE, NOW, band=0.5)


def test_a_queue_with_few_samples_takes_the_fleets():
    near = [Outcome(0, 1000, 800), Outcome(0, 500, 600), Outcome(0, 500, 700),
            Outcome(0, 1000, 900), Outcome(0, 900, 990)]
    cal = calibration({"a": LATE, "b": [Outcome(0, 100, 900)], "c": near}, NOW, samples=30)
    assert cal.by_queue == {"a": 2.0, "c": 1.0}
    # the fleet: ratios 3, 5, 0.5, 2, 1.667, 9 (b), 0.8, 1.2, 1.4, 0.9, 1.1: median 1.4,
    # inside the band
    assert cal.of("b") == 1.0 and cal.fleet == 1.0
    cal = calibration({"a": LATE, "b": [Outcome(0, 100, 900)]}, NOW, samples=30)
    # b's one sample is too few: the fleet's, 3, 9, 5, 0.5, 2, 1.667 -> (2 + 3) / 2 = 2.5
    assert cal.of("b") == 2.5 and cal.of("a") == 2.0 and cal.of("zzz") == 2.5


def test_apply_scales_the_wait_and_widens_the_range():
    est = Estimate(start=1300, low=1100, high=1500, starts=(1300, 1100, 1200, 1500))
    later = apply(est, NOW, 2.0)
    assert (later.start, later.low, later.high) == (1600, 1100, 1600)
    earlier = apply(est, NOW, 0.25)
    assert (earlier.start, earlier.low, earlier.high) == (1075, 1075, 1500)
    assert earlier.starts == est.starts  # the simulated starts are kept
    assert apply(est, NOW, 1.0) is est


def test_apply_leaves_unknown_and_immediate_starts():
    beyond = Estimate(start=None, low=1200, high=None)
    assert apply(beyond, NOW, 2.0) is beyond
    now = Estimate(start=NOW, low=NOW, high=1200)
    assert apply(now, NOW, 2.0) is now
    # a range with no upper end (a level beyond the horizon) keeps none
    open_high = apply(Estimate(start=1100, low=1050, high=None), NOW, 3.0)
    assert (open_high.start, open_high.low, open_high.high) == (1300, 1050, None)
