"""bench.eta_accuracy's breakdown and the calibrated configuration's raw rows (hand-built)."""

from __future__ import annotations

from bench.eta_accuracy import breakdown, raw_rows


def workloads():
    data = {"workloads": [
        {"name": "a", "queue": "q1", "pods": [{"count": 1, "gpus": 1}]},
        {"name": "b", "queue": "q1", "pods": [{"count": 1, "gpus": 1}]},
        {"name": "c", "queue": "q2", "pods": [{"count": 2, "gpus": 8}]},
        {"name": "d", "queue": "q2", "pods": [{"count": 1, "gpus": 8}]},
    ]}
    out = {
        # waited 1,000 s, forecast 800: too early, error 0.2
        "a": {"eta_at_submit": {"at": 0, "start": 800, "low": 500, "high": 2000,
                                "raw": [400, 400, 2000], "starts": [800, 500, 700, 2000]},
              "admissions": [{"at": 1000}]},
        # waited 2 days, forecast 3 days: too late, error 0.5
        "b": {"eta_at_submit": {"at": 0, "start": 259_200, "low": 1000, "high": 300_000,
                                "raw": [259_200, 1000, 300_000],
                                "starts": [259_200, 1000, 200_000, 300_000]},
              "admissions": [{"at": 172_800}]},
        # waited 5 h, exact
        "c": {"eta_at_submit": {"at": 100, "start": 18_100, "low": 18_100, "high": 18_100,
                                "raw": [18_100, 18_100, 18_100],
                                "starts": [18_100, 18_100, 18_100, 18_100]},
              "admissions": [{"at": 18_100}]},
        # did not wait 10 min: left out
        "d": {"eta_at_submit": {"at": 0, "start": 0, "low": 0, "high": 0, "raw": [0, 0, 0],
                                "starts": [0, 0, 0, 0]},
              "admissions": [{"at": 30}]},
    }
    return data, out


def test_breakdown_by_wait_size_queue_and_simulated_start():
    data, out = workloads()
    lines = breakdown(data, out)
    rows = {line[:28].strip(): line[28:].split() for line in lines[1:]}
    # n, median error / wait, forecast / actual quartiles, forecast early
    assert rows["all"] == ["3", "0.200", "0.90", "1.00", "1.25", "1"]
    assert rows["wait < 1 h"] == ["1", "0.200", "0.80", "0.80", "0.80", "1"]
    assert rows["wait 1-6 h"][:2] == ["1", "0.000"]
    assert rows["wait 1-3 days"] == ["1", "0.500", "1.50", "1.50", "1.50", "0"]
    assert rows["GPUs 1"][:2] == ["2", "0.350"] and rows["GPUs >= 8"][:2] == ["1", "0.000"]
    assert rows["queue q1"][:2] == ["2", "0.350"] and rows["queue q2"][0] == "1"
    # the p25 fast-forward: a at 500 (0.5 early), b at 1000, c exact
    assert rows["fast-forward p25"][:2] == ["3", "0.500"]


def test_raw_rows_take_the_forecast_before_the_calibration():
    _data, out = workloads()
    raw = {eta["at"]: (eta["start"], eta["low"]) for eta, _actual in raw_rows(out)
           if eta["start"] == 400}
    assert raw == {0: (400, 400)}


def test_accuracy_counts_the_range_and_its_width():
    from bench.eta_accuracy import accuracy, forecast_rows

    figures = accuracy(forecast_rows(workloads()[1]), 60.0)
    # a (1,000 s) inside [500, 2,000]: width 1.5 waits; b (2 days) inside, width ~1.73;
    # c (5 h) exact, width 0; d did not wait
    assert figures["waited"] == 3 and figures["waited_inside_share"] == 1.0
    assert figures["median_width_waited"] == 1.5
    assert figures["median_relative_error_waited"] == 0.2
