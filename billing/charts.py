"""Plotly figures (JSON-ready dicts) from billing selector data: no queries here."""

from __future__ import annotations

from typing import Any

LAYOUT = {"margin": {"l": 55, "r": 10, "t": 36, "b": 40}, "height": 320,
          "legend": {"orientation": "h"}, "font": {"family": "system-ui, sans-serif"}}


def _days(days: list) -> list[str]:
    return [d.date().isoformat() for d in days]


# Days as categories: one label per day ("2026-12-02"), also when the range is a single day
# (a date axis would then label hours of it, e.g. "23:59:59.9995").
DAY_AXIS = {"type": "category", "title": {"text": "day (UTC)"}}


def _fig(data: list[dict[str, Any]], title: str, ytitle: str, **layout: Any) -> dict[str, Any]:
    return {"data": data, "layout": {**LAYOUT, "title": {"text": title},
                                     "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero"},
                                     **layout}}


def spend_by_team_figure(series: dict[str, Any], currency: str) -> dict[str, Any]:
    """Daily spend stacked by team."""
    x = _days(series["days"])
    data = [{"type": "bar", "name": team, "x": x, "y": ys}
            for team, ys in series["teams"].items()]
    return _fig(data, "Spend per day by team", currency, barmode="stack", xaxis=DAY_AXIS)


def reserved_vs_active_figure(series: dict[str, Any]) -> dict[str, Any]:
    """Reserved (running), frozen and active GPU-hours per day."""
    x = _days(series["days"])
    return _fig([
        {"type": "bar", "name": "reserved (running)", "x": x, "y": series["reserved"]},
        {"type": "bar", "name": "frozen", "x": x, "y": series["frozen"]},
        {"type": "scatter", "mode": "lines+markers", "name": "active", "x": x,
         "y": series["active"]},
    ], "GPU-hours: reserved vs active", "GPU-hours", barmode="stack", xaxis=DAY_AXIS)


def frozen_cost_figure(series: dict[str, Any], currency: str) -> dict[str, Any]:
    """Cost of frozen time per day (reserved, pods not yet running)."""
    x = _days(series["days"])
    return _fig([{"type": "bar", "name": "frozen cost", "x": x, "y": series["frozen_cost"],
                  "marker": {"color": "#8a5cf6"}}], "Frozen cost per day", currency,
                xaxis=DAY_AXIS)


def idle_cost_figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Idle capacity (installed minus allocated) per GPU flavor, priced."""
    x = [r["flavor"] for r in rows]
    currency = rows[0]["currency"] if rows else ""
    return _fig([
        {"type": "bar", "name": "allocated GPU-hours", "x": x,
         "y": [float(r["allocated_gpu_hours"]) for r in rows]},
        {"type": "bar", "name": "idle GPU-hours", "x": x,
         "y": [float(r["idle_gpu_hours"]) for r in rows],
         "text": [f"{r['idle_cost']} {currency}" if r["idle_cost"] is not None else ""
                  for r in rows]},
    ], "Idle capacity (installed minus allocated)", "GPU-hours", barmode="stack")


def top_workloads_figure(rows: list[dict[str, Any]], currency: str) -> dict[str, Any]:
    """The costliest workloads, horizontal bars."""
    labels = [f"{r['workload_name'] or '?'} (#{r['workload_id']})" for r in rows][::-1]
    return _fig([{"type": "bar", "orientation": "h", "name": "cost", "x":
                  [float(r["a"]) for r in rows][::-1], "y": labels}],
                "Top workloads by cost", "", xaxis={"title": {"text": currency}},
                margin={"l": 180, "r": 10, "t": 36, "b": 40})


def burndown_figure(series: dict[str, Any], currency: str) -> dict[str, Any]:
    """Cumulative spend against the budget, with the end-of-period forecast."""
    x = _days(series["days"])
    start, end = series["start"].date().isoformat(), series["end"].date().isoformat()
    last_x = x[-1] if x else start
    last_y = series["cumulative"][-1] if series["cumulative"] else 0.0
    return _fig([
        {"type": "scatter", "mode": "lines+markers", "name": "spent", "x": x,
         "y": series["cumulative"]},
        {"type": "scatter", "mode": "lines", "name": "budget", "x": [start, end],
         "y": [series["amount"]] * 2, "line": {"dash": "dot", "color": "#b3261e"}},
        {"type": "scatter", "mode": "lines", "name": "forecast", "x": [last_x, end],
         "y": [last_y, series["forecast"]], "line": {"dash": "dash", "color": "#555"}},
    ], f"Burn-down: {series['title']}", currency)
