"""bench.eta_rules: start rules evaluated offline on recorded forecasts (hand-built dumps)."""

from __future__ import annotations

import json

import pytest

from bench.eta_rules import RULES, figures, load, median, search, split, starts_of


def row(name, at, actual, starts):
    return {"name": name, "queue": "q", "actual": actual,
            "eta": {"at": at, "starts": starts}}


def test_median_counts_a_start_beyond_the_horizon_as_the_latest():
    assert median([100.0, 300.0, 200.0, None]) == 250.0
    assert median([100.0, None, None, 200.0]) is None


def test_figures_over_the_waited_with_the_live_range_widened_to_the_start():
    # a: waited 1,000 s, start 800 (error 0.2), inside the live range [500, 2000];
    # b: waited 100 s (not counted in the error), started before its range;
    # c: waited 2,000 s, start 3,000 (error 0.5), actual outside its range [2500, 4000]
    rows = [({"at": 0, "starts": [800, 500, 700, 2000]}, 1000.0),
            ({"at": 0, "starts": [900, 900, 900, 900]}, 100.0),
            ({"at": 0, "starts": [3000, 2500, 3000, 4000]}, 2000.0)]
    err, inside, n = figures(rows, [800, 900, 3000])
    assert (err, n) == (pytest.approx(0.35), 2)
    assert inside == pytest.approx(1 / 3)
    # a start of 1,900 for c widens its range to [1900, 4000]: the actual inside
    err, inside, n = figures(rows, [800, 900, 1900])
    assert inside == pytest.approx(2 / 3) and err == pytest.approx((0.2 + 0.05) / 2)


def test_live_rule_and_a_split_by_forecast_wait():
    s = starts_of([5000.0, 1000.0, 2000.0, 9000.0, 3000.0, 4000.0, 1500.0, 6000.0])
    eta = {"at": 0}
    assert RULES["live: median(m75, p25, p50, p95)"](s, eta) == 3500.0
    short = split(lambda s, e: s["p25"], lambda s, e: s["m75"], 6000.0)
    assert short(s, eta) == 1000.0  # the long rule's wait (5,000) is under the limit
    assert split(lambda s, e: s["p25"], lambda s, e: s["m75"], 5000.0)(s, eta) == 5000.0


def test_load_appends_a_second_replays_extra_starts(tmp_path):
    base, more = tmp_path / "a", tmp_path / "sa"
    (tmp_path / "a.new.json").write_text(json.dumps([row("w", 0, 10, [1, 2, 3, 4, 5])]))
    (tmp_path / "sa.new.json").write_text(json.dumps([row("w", 0, 10, [1, 2, 3, 4, 9, 8])]))
    got = load(f"{base}+{more}")
    assert got[0]["eta"]["starts"] == [1, 2, 3, 4, 5, 9, 8]
    (tmp_path / "sa.new.json").write_text(json.dumps([row("w", 0, 10, [1, 2, 7, 4, 9])]))
    with pytest.raises(SystemExit):  # not the same replay's live starts
        load(f"{base}+{more}")


def test_search_ranks_rules_by_their_worst_stretch(tmp_path):
    # Two stretches; on both the p50 start is exact and m75 twice the wait: the median of p50
    # alone is best (error 0), and a split taking p50 under any limit ties with it.
    for name in ("x", "y"):
        rows = [row(f"w{i}", 0, 1000.0 * (i + 1), [2000.0 * (i + 1), 100.0,
                                                    1000.0 * (i + 1), 9e9]) for i in range(5)]
        (tmp_path / f"{name}.new.json").write_text(json.dumps(rows))
    lines = search([str(tmp_path / "x"), str(tmp_path / "y")], top=2)
    assert lines[0].startswith("15 medians of 1-5 starts")
    assert lines[1].split() == ["median(p50)", "0.000", "0.000"]
    assert "splits by forecast wait" in lines[3] and lines[4].split()[-2:] == ["0.000", "0.000"]
