"""The demo history's submissions: a fixed draw, shaped by hour of day and day of week."""

from datetime import UTC, datetime, timedelta

import pytest

from portal.demo_history import DEMAND, HistoryError, draw_workloads, parse_span

START = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize("text,span", [("30d", timedelta(days=30)), ("72h", timedelta(hours=72)),
                                       (" 1h ", timedelta(hours=1)), ("90d", timedelta(days=90))])
def test_spans(text, span):
    assert parse_span(text) == span


@pytest.mark.parametrize("text,message", [
    ("30", "expected days or hours, such as 30d or 72h"),
    ("5w", "expected days or hours"),
    ("-3d", "expected days or hours"),
    ("0h", "between 1h and 90d"),
    ("91d", "between 1h and 90d"),
])
def test_bad_spans_say_what_is_wrong(text, message):
    with pytest.raises(HistoryError, match=message):
        parse_span(text)


def test_the_draw_is_fixed_and_follows_the_week():
    leaves = set(DEMAND)
    a = draw_workloads(START, timedelta(days=14), leaves)
    assert a == draw_workloads(START, timedelta(days=14), leaves)
    assert len({w["name"] for w in a}) == len(a)
    assert [w["submit_at"] for w in a] == sorted(w["submit_at"] for w in a)
    # Everything arrives inside the window, at least an hour before its end.
    assert all(0 < w["submit_at"] <= 13 * 86400 + 23 * 3600 for w in a)
    days = [0] * 14
    for w in a:
        days[int(w["submit_at"] // 86400)] += 1
    weekdays = [n for i, n in enumerate(days) if i % 7 < 5]
    weekends = [n for i, n in enumerate(days) if i % 7 >= 5]
    assert sum(weekends) / len(weekends) < 0.6 * sum(weekdays) / len(weekdays)
    # Office hours dominate the research queues; recsys runs its batch at night.
    hour = lambda w: (START + timedelta(seconds=w["submit_at"])).hour  # noqa: E731
    detection = [hour(w) for w in a if w["x-path"] == "research/vision/detection"]
    recsys = [hour(w) for w in a if w["x-path"] == "product/recsys"]
    assert sum(8 <= h < 18 for h in detection) > 0.6 * len(detection)
    assert sum(h < 6 or h >= 20 for h in recsys) > 0.5 * len(recsys)


def test_only_the_leaves_that_exist_are_drawn():
    a = draw_workloads(START, timedelta(days=3), {"research/robotics"})
    assert a and {w["x-path"] for w in a} == {"research/robotics"}
    assert {w["queue"] for w in a} == {"robotics"}
