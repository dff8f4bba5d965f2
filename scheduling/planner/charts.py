"""Plotly figures (JSON-ready dicts, drawn by static/js/charts.js) of a trace replay's three
sides: waits per queue and their distribution, GPUs allocated over time, fairness."""

from __future__ import annotations

from typing import Any

LAYOUT = {"margin": {"l": 55, "r": 10, "t": 36, "b": 60}, "height": 340,
          "legend": {"orientation": "h"}, "font": {"family": "system-ui, sans-serif"}}
COLORS = {"static": "#8a8f98", "current": "#2f6fdb", "proposed": "#1d7a46"}
LABELS = {"static": "static quotas", "current": "current tree", "proposed": "proposed tree"}


def _fig(data: list[dict[str, Any]], title: str, ytitle: str, **layout: Any) -> dict[str, Any]:
    return {"data": data, "layout": {**LAYOUT, "title": {"text": title},
                                     "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero"},
                                     **layout}}


def _hours(v: Any) -> float | None:
    return None if v is None else round(float(v) / 3600, 3)


def waits_per_queue_figure(result: dict[str, Any]) -> dict[str, Any]:
    """Each queue's median and p95 wait, per side (bars: p95; markers: median)."""
    queues = sorted({q for side in result.values() for q in side["queues"]})
    data: list[dict[str, Any]] = []
    for label, side in result.items():
        qs = side["queues"]
        data.append({"type": "bar", "name": f"{LABELS[label]} p95", "x": queues,
                     "y": [_hours(qs.get(q, {}).get("p95_wait_s")) for q in queues],
                     "marker": {"color": COLORS[label]}, "offsetgroup": label})
        data.append({"type": "scatter", "mode": "markers", "name": f"{LABELS[label]} median",
                     "x": queues, "showlegend": False,
                     "y": [_hours(qs.get(q, {}).get("wait_quantiles_s", {}).get("50"))
                           for q in queues],
                     "marker": {"color": "#000", "symbol": "line-ew-open", "size": 14}})
    return _fig(data, "Wait per queue: p95 (bars) and median (marks)", "hours",
                barmode="group")


def wait_distribution_figure(result: dict[str, Any]) -> dict[str, Any]:
    """The waits' percentiles over every workload, per side."""
    data = []
    for label, side in result.items():
        qs = side.get("wait_quantiles_s") or {}
        data.append({"type": "scatter", "mode": "lines+markers", "name": LABELS[label],
                     "x": [int(k) for k in qs], "y": [_hours(v) for v in qs.values()],
                     "line": {"color": COLORS[label]}})
    return _fig(data, "Distribution of waits (all queues)", "hours",
                xaxis={"title": {"text": "percentile of workloads"}})


def allocation_figure(result: dict[str, Any]) -> dict[str, Any]:
    """GPUs allocated over simulated time, per side, with the fleet's GPUs."""
    data: list[dict[str, Any]] = []
    for label, side in result.items():
        series = side["allocation"]
        data.append({"type": "scatter", "mode": "lines", "name": LABELS[label],
                     "x": series["t_h"], "y": series["gpus"], "line": {"color": COLORS[label]}})
    first = next(iter(result.values()), None)
    if first and first.get("fleet_gpus"):
        xs = first["allocation"]["t_h"]
        data.append({"type": "scatter", "mode": "lines", "name": "fleet GPUs",
                     "x": [xs[0], xs[-1]], "y": [first["fleet_gpus"]] * 2,
                     "line": {"dash": "dot", "color": "#b3261e"}})
    return _fig(data, "GPUs allocated over time", "GPUs",
                xaxis={"title": {"text": "hours from the trace's start"}})


def fairness_figure(result: dict[str, Any]) -> dict[str, Any]:
    """Jain's index, the share of time every guarantee was met, and the allocation rate."""
    x = ["Jain's index", "guarantees met (share of time)", "GPU allocation rate"]
    data = [{"type": "bar", "name": LABELS[label], "x": x, "marker": {"color": COLORS[label]},
             "y": [side["jain_fairness"], side["guarantees_met_share"],
                   side["gpu_allocation_rate"]]}
            for label, side in result.items()]
    return _fig(data, "Fairness and allocation", "0 to 1", barmode="group",
                yaxis={"range": [0, 1.05], "title": {"text": "0 to 1"}})


def figures(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The four charts as the chart partial takes them."""
    out = []
    for key, title, fig in (
            ("waits", "Waits per queue", waits_per_queue_figure(result)),
            ("wait-dist", "Distribution of waits", wait_distribution_figure(result)),
            ("allocation", "Allocation over time", allocation_figure(result)),
            ("fairness", "Fairness", fairness_figure(result))):
        out.append({"id": f"chart-{key}", "data_id": f"chart-{key}-data", "title": title,
                    "json": fig})
    return out
