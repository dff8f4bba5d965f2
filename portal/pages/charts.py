"""Plotly figures (as JSON-ready dicts) from selector data: no queries here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

LAYOUT = {"margin": {"l": 50, "r": 10, "t": 36, "b": 40}, "height": 320,
          "legend": {"orientation": "h"}, "font": {"family": "system-ui, sans-serif"}}


def _iso(ts: list[datetime]) -> list[str]:
    return [t.isoformat() for t in ts]


def queue_usage_figure(series: dict[str, Any], *, title: str, qmin: Any, qmax: Any
                       ) -> dict[str, Any]:
    """Used GPUs over time with the queue's min and max as flat lines."""
    x = _iso(series["t"])
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "used", "x": x, "y": series["used"],
         "fill": "tozeroy", "line": {"color": "#2f6fdb"}},
    ]
    if qmin is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "min", "x": x,
                     "y": [float(qmin)] * len(x), "line": {"dash": "dash", "color": "#1d7a46"}})
    if qmax is not None:
        data.append({"type": "scatter", "mode": "lines", "name": "max", "x": x,
                     "y": [float(qmax)] * len(x), "line": {"dash": "dot", "color": "#b3261e"}})
    return {"data": data, "layout": {**LAYOUT, "title": {"text": title},
                                     "yaxis": {"title": {"text": "GPUs"}, "rangemode": "tozero"}}}


def cluster_allocation_figure(series: dict[str, Any]) -> dict[str, Any]:
    """GPUs allocated per cluster over time (stacked), with total installed as a line."""
    x = _iso(series["t"])
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "stackgroup": "one", "name": name, "x": x, "y": ys}
        for name, ys in series["clusters"].items()
    ]
    total = sum(series["installed"].values())
    if total:
        data.append({"type": "scatter", "mode": "lines", "name": "installed", "x": x,
                     "y": [total] * len(x), "line": {"dash": "dot", "color": "#333"}})
    return {"data": data, "layout": {**LAYOUT, "title": {"text": "GPUs allocated per cluster"},
                                     "yaxis": {"title": {"text": "GPUs"}, "rangemode": "tozero"}}}


def queue_waits_figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and p90 wait before admission per queue (minutes)."""
    queues = [r["queue"] for r in rows]
    return {
        "data": [
            {"type": "bar", "name": "median wait", "x": queues,
             "y": [r["median_min"] for r in rows]},
            {"type": "bar", "name": "p90 wait", "x": queues, "y": [r["p90_min"] for r in rows]},
            {"type": "bar", "name": "longest pending now", "x": queues,
             "y": [r["pending_max_min"] for r in rows]},
        ],
        "layout": {**LAYOUT, "barmode": "group", "title": {"text": "Waits per queue"},
                   "yaxis": {"title": {"text": "minutes"}, "rangemode": "tozero"}},
    }
