"""How answers are printed: `--output json` and `yaml` print the data as the API gave it
(for scripts); `table`, the default, prints aligned columns and sentences for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


def emit(data: Any, fmt: str, table: Callable[[], str]) -> None:
    """Print `data` as JSON or YAML, or what `table()` makes of it. JSON is indented on a
    terminal and on one line otherwise (for a program: ten times faster on a long list)."""
    if fmt == "json":
        print(json.dumps(data, indent=2 if sys.stdout.isatty() else None, ensure_ascii=False))
    elif fmt == "yaml":
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100), end="")
    else:
        text = table()
        if text:
            print(text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *,
          right: Sequence[int] = ()) -> str:
    """Aligned columns, two spaces apart; the columns numbered in `right` align right."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r]
                                           for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601, `Z` or an offset) as an aware datetime."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def span(seconds: float) -> str:
    """A duration as people say it: `45s`, `12m`, `1h 20m`, `3d 4h`."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def moment(value: str | None) -> str:
    """`2026-05-01 12:00 UTC`; `-` for none."""
    parsed = parse_time(value)
    return f"{parsed.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if parsed else "-"


def when(value: str | None, now: datetime | None = None) -> str:
    """`2026-05-01 12:00 UTC (5m ago)` or `(in 1h 20m)`; `-` for none."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    now = now or datetime.now(UTC)
    delta = (moment - now).total_seconds()
    relative = "now" if abs(delta) < 1 else (f"in {span(delta)}" if delta > 0
                                              else f"{span(delta)} ago")
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({relative})"


def ago(value: str | None, now: datetime | None = None) -> str:
    """How long ago, short: `5m`, `2d 3h`; `-` for none."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return span(((now or datetime.now(UTC)) - moment).total_seconds())


def number(value: Any) -> str:
    """A quantity without a needless `.0`: 8, 7.5; `-` for none."""
    if value is None:
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
