"""Dates the billing pages and API read from people: days and months, checked here once, each
error naming the parameter, the value and the range."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time

from django.core.exceptions import ValidationError

# Day-based ranges end the day after their last day: the last day must leave room for it.
MIN_DAY = date(1970, 1, 1)
MAX_DAY = date(9998, 12, 31)
_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_MONTH = re.compile(r"(\d{4})-(\d{2})", re.ASCII)


def parse_day(value: str, name: str) -> date:
    """`YYYY-MM-DD` as a date from MIN_DAY to MAX_DAY, or a ValidationError naming `name`."""
    try:
        day = date.fromisoformat(value) if _DAY.fullmatch(value) else None
    except ValueError:
        day = None
    if day is None:
        raise ValidationError({name: [f"{value!r} is not a date (YYYY-MM-DD)"]})
    if not MIN_DAY <= day <= MAX_DAY:
        raise ValidationError({name: [f"{value} is out of range: a date from {MIN_DAY} to "
                                      f"{MAX_DAY}"]})
    return day


def day_start(day: date) -> datetime:
    """The UTC midnight a day starts at."""
    return datetime.combine(day, time(), tzinfo=UTC)


def parse_month(value: str, name: str = "month") -> date:
    """`YYYY-MM` as the month's first day (from MIN_DAY's month to MAX_DAY's)."""
    match = _MONTH.fullmatch(value)
    if match is None or not 1 <= int(match[2]) <= 12:
        raise ValidationError({name: [f"{value!r} is not a month (YYYY-MM, MM from 01 to 12)"]})
    month = date(int(match[1]), int(match[2]), 1) if int(match[1]) else None
    if month is None or not MIN_DAY <= month <= MAX_DAY:
        raise ValidationError({name: [f"{value} is out of range: a month from "
                                      f"{MIN_DAY:%Y-%m} to {MAX_DAY:%Y-%m}"]})
    return month
