"""The recommendation method (billing/recommend/method.py): percentiles of the hourly demand,
the fit under the parent, the borrowed and lent hours, the profile by hour and weekday."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from billing.recommend.method import QueueHistory, percentile, recommend

# Two weeks from a Monday 00:00 UTC.
HOURS = [datetime(2026, 11, 2, tzinfo=UTC) + timedelta(hours=i) for i in range(14 * 24)]


def day_shift(level: float) -> list[float]:
    """`level` GPUs from 8:00 to 20:00 on weekdays, nothing otherwise."""
    return [level if h.weekday() < 5 and 8 <= h.hour < 20 else 0.0 for h in HOURS]


def flat(level: float) -> list[float]:
    return [level] * len(HOURS)


def test_min_is_the_median_and_max_the_95th_percentile():
    q = QueueHistory("a/steady", flat(6.2), flat(6.2), 2, 4)
    (rec,) = recommend([q], HOURS, capacity=64)
    assert (rec.min, rec.max) == (7, 7) and rec.changes
    # Used 6.2 against a min of 2 every hour: 4.2 borrowed each hour, nothing lent.
    assert rec.evidence["borrowed_gpu_hours"] == round(4.2 * len(HOURS), 1)
    assert rec.evidence["lent_gpu_hours"] == 0
    assert rec.evidence["hours_above_current_max"] == len(HOURS)
    assert rec.evidence["hours_above_proposed_max"] == 0


def test_a_day_shift_team_is_judged_by_its_working_hours():
    level = [x * (1 + (i % 4) / 4) for i, x in enumerate(day_shift(8))]  # 8, 10, 12, 14
    day = QueueHistory("a/day", level, level, 2, 16)
    (rec,) = recommend([day], HOURS, capacity=64)
    # Busy 120 of 336 hours (the median hour is idle): over the busy hours the median is 10
    # and the 95th percentile 14.
    assert rec.evidence["active_hours"] == 120 and rec.evidence["demand_percentiles"]["50"] == 0
    assert (rec.min, rec.max) == (10, 14)
    by_hour = {h["hour"]: h for h in rec.evidence["by_hour"]}
    assert by_hour[10]["p90"] == 12 and by_hour[3]["p90"] == 0  # (24d + 10) % 4 == 2: 12
    days = {d["day"]: d for d in rec.evidence["by_weekday"]}
    assert days["Mon"]["p90"] == 14 and days["Sun"]["p90"] == 0


def test_siblings_mins_are_scaled_to_fit_the_parent_and_max_to_its_ceiling():
    a = QueueHistory("p/a", flat(30), flat(30), 10, None)
    b = QueueHistory("p/b", flat(10), flat(10), 10, None)
    ra, rb = recommend([a, b], HOURS, capacity=20, ceiling=24)
    assert (ra.min, rb.min) == (15, 5) and ra.evidence["scaled_to_fit"]
    assert ra.evidence["unscaled_min"] == 30
    assert (ra.max, rb.max) == (24, 10)


def test_lent_hours_are_the_unused_min_others_borrowed():
    # a uses nothing of its min 8 while b borrows 5 above its min 0: a lent 5 GPUs each hour.
    a = QueueHistory("p/a", flat(0), flat(0), 8, 16)
    b = QueueHistory("p/b", flat(5), flat(5), 0, 16)
    ra, rb = recommend([a, b], HOURS, capacity=16)
    assert ra.evidence["lent_gpu_hours"] == 5 * len(HOURS)
    assert rb.evidence["borrowed_gpu_hours"] == 5 * len(HOURS) and rb.evidence[
        "lent_gpu_hours"] == 0
    assert (ra.min, rb.min) == (0, 5)


def test_lent_hours_are_shared_by_the_idle_siblings_not_counted_once_each():
    # b borrows 6 above its min 0 while a (min 8) and c (min 4) are idle: 6 borrowed, shared
    # 8:4 between them (4 and 2 each hour), not 6 each.
    a = QueueHistory("p/a", flat(0), flat(0), 8, 16)
    b = QueueHistory("p/b", flat(6), flat(6), 0, 16)
    c = QueueHistory("p/c", flat(0), flat(0), 4, 16)
    ra, rb, rc = recommend([a, b, c], HOURS, capacity=16)
    assert ra.evidence["lent_gpu_hours"] == 4 * len(HOURS)
    assert rc.evidence["lent_gpu_hours"] == 2 * len(HOURS)
    assert ra.evidence["lent_gpu_hours"] + rc.evidence["lent_gpu_hours"] == rb.evidence[
        "borrowed_gpu_hours"]


def test_percentile_is_nearest_rank():
    assert percentile([], 50) == 0
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 95) == 4


def test_never_below_lendable_and_the_rest_shared():
    a = QueueHistory("p/a", flat(1), flat(1), 8, None, lendable=6)
    b = QueueHistory("p/b", flat(30), flat(30), 8, None)
    ra, rb = recommend([a, b], HOURS, capacity=16)
    # a asks 1 but lends 6 of its min: it keeps 6; b gets the other 10 of the 16.
    assert (ra.min, rb.min) == (6, 10) and ra.evidence["floored_at_lendable"]


def test_no_demand_leaves_the_max():
    idle = QueueHistory("p/idle", flat(0), flat(0), 4, 12)
    (rec,) = recommend([idle], HOURS, capacity=16)
    assert (rec.min, rec.max) == (0, 12) and rec.evidence["active_hours"] == 0


def test_max_never_refuses_the_largest_job_seen():
    q = QueueHistory("p/a", flat(4), flat(4), 4, None, largest_job=24)
    (rec,) = recommend([q], HOURS, capacity=64)
    assert (rec.min, rec.max) == (4, 24) and rec.evidence["largest_job_gpus"] == 24


def test_exclusive_parts_fit_the_parents_exclusive_part():
    # Both lend 2 of their min: their exclusive parts (min - lendable) are 8 and 4 at the
    # medians 10 and 6, but the parent's proposal keeps only 6 exclusive: scaled to 4 and 2.
    a = QueueHistory("p/a", flat(10), flat(10), 4, None, lendable=2)
    b = QueueHistory("p/b", flat(6), flat(6), 4, None, lendable=2)
    recs = recommend([a, b], HOURS, capacity=64, exclusive_capacity=6)
    assert [(r.min, r.evidence["scaled_to_fit"]) for r in recs] == [(6, True), (4, True)]
    assert sum(r.min - 2 for r in recs) <= 6
    # Without lendables there is no exclusive part to fit.
    c = QueueHistory("p/c", flat(10), flat(10), 4, None)
    (rec,) = recommend([c], HOURS, capacity=64, exclusive_capacity=0)
    assert rec.min == 10


def test_a_parent_never_below_its_childrens_floors_and_a_kept_max_within_the_ceiling():
    idle = QueueHistory("p", flat(0), flat(0), 8, 40, floor=5.5)
    (rec,) = recommend([idle], HOURS, capacity=64, ceiling=24)
    # No demand: min its floor (rounded up), the max kept but no higher than the ceiling.
    assert (rec.min, rec.max) == (6, 24)
