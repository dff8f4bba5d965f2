"""bench/runtime_predictability.py: the run-time predictors on hand-made tenants."""

from __future__ import annotations

import pytest

from bench.runtime_predictability import month_medians, study


def test_month_medians_slide_over_thirty_days():
    day = 86400.0
    times = [0.0, 1.0, 2.0, 31 * day]
    runs = [10.0, 30.0, 20.0, 100.0]
    # j runs known: the median of those of the 30 days before the latest of them
    assert month_medians(times, runs) == [0.0, 10.0, 20.0, 20.0, 100.0]


def test_a_steady_tenant_is_predicted_exactly_and_a_changing_one_is_not():
    steady = [(float(i), 100.0, 1, "a") for i in range(20)]
    out = study(steady, [0.0], [1, 5])
    for block in ("lag 0 s, 1 runs", "lag 0 s, 5 runs"):
        assert {r["median"] for r in out[block].values()} == {0.0}
    # ten runs of 100 s, then ten of 1,000 s, one a second: with a lag of 5 s, runs 9..19
    # have five or more submitted that long before; `last` predicts run i by run i - 5, so
    # runs 10..14 (long) from short ones, 0.9 off, and the other six exactly
    changing = [(float(i), 100.0 if i < 10 else 1000.0, 1, "a") for i in range(20)]
    row = study(changing, [5.0], [1])["lag 5 s, 1 runs"]
    assert row["last"] == {"median": 0.0, "within_25": round(6 / 11, 3), "n": 11}
    # the mean of the latest ten catches up one run at a time: 0 off for run 9, 0.9 for runs
    # 10..14, then 0.81, 0.72, 0.63, 0.54, 0.45 (run 19 from runs 5..14: 550 s)
    assert row["last10 mean"]["n"] == 11
    assert row["last10 mean"]["median"] == pytest.approx(0.81)
