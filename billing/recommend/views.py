"""The recommendations page: per queue (every level) and key (flavor/resource) the proposed
min and max with the evidence and the demand by hour of day (a chart per key); file one as a
capacity request, or replay them all over the history."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from billing.recommend.services import (
    as_changes,
    options_from,
    recommendation_file,
    recommendations,
    recommendations_replay,
)
from scheduling.planner.traces import TraceError

LAYOUT = {"margin": {"l": 55, "r": 10, "t": 36, "b": 40}, "height": 320,
          "legend": {"orientation": "h"}, "font": {"family": "system-ui, sans-serif"}}


def profile_figure(key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each queue's median demand by hour of day (solid) and its 90th percentile (dotted)."""
    data: list[dict[str, Any]] = []
    for r in rows:
        hours = [h["hour"] for h in r["evidence"]["by_hour"]]
        data.append({"type": "scatter", "mode": "lines", "name": f"{r['queue']} p50",
                     "x": hours, "y": [h["p50"] for h in r["evidence"]["by_hour"]],
                     "legendgroup": r["queue"]})
        data.append({"type": "scatter", "mode": "lines", "name": f"{r['queue']} p90",
                     "x": hours, "y": [h["p90"] for h in r["evidence"]["by_hour"]],
                     "line": {"dash": "dot"}, "legendgroup": r["queue"], "showlegend": False})
    return {"data": data, "layout": {
        **LAYOUT, "title": {"text": f"{key}: demand by hour of day (UTC)"},
        "xaxis": {"title": {"text": "hour of day (UTC)"}, "dtick": 3},
        "yaxis": {"title": {"text": f"{rows[0].get('unit', 'GPU') if rows else 'GPU'}s (used + "
                                    "pending)"}, "rangemode": "tozero"}}}


def _figures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chart per key (flavor/resource) with demand."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["evidence"]["active_hours"] or r["resource"] == "gpu":
            by_key.setdefault(f"{r['flavor']}/{r['resource']}", []).append(r)
    return [{"id": f"chart-profile-{i}", "data_id": f"chart-profile-{i}-data",
             "title": f"{key} demand by hour", "json": profile_figure(key, rs)}
            for i, (key, rs) in enumerate(sorted(by_key.items()))]


@login_required
def recommendations_page(request: HttpRequest) -> HttpResponse:
    """The recommendations over the chosen window (default 30 days)."""
    errors: dict[str, list[str]] = {}
    rows: list[dict[str, Any]] = []
    try:
        options = options_from(request.GET)
        rows = recommendations(user=request.user, options=options)
    except ValidationError as exc:
        errors = exc.message_dict
    return render(request, "billing/recommendations.html", {
        "rows": rows, "errors": errors, "params": request.GET,
        "figures": _figures(rows), "changes": as_changes(rows)["quotas"] if rows else [],
    }, status=400 if errors else 200)


def _back(request: HttpRequest, errors: dict[str, list[str]]) -> HttpResponse:
    return render(request, "billing/recommendations.html", {
        "rows": [], "errors": errors, "params": request.POST, "figures": [], "changes": []},
        status=400)


@login_required
@require_POST
def recommendation_file_view(request: HttpRequest) -> HttpResponse:
    """File one queue's recommendation as a capacity request and show the request."""
    try:
        options = options_from(request.POST)
        req = recommendation_file(user=request.user, queue=request.POST.get("queue", ""),
                                  flavor=request.POST.get("flavor", ""),
                                  resource=request.POST.get("resource") or "gpu",
                                  options=options)
    except ValidationError as exc:
        return _back(request, exc.message_dict)
    return redirect("capacity-request-detail", req.pk)


@login_required
@require_POST
def recommendations_replay_view(request: HttpRequest) -> HttpResponse:
    """Replay the history under static quotas, the current tree and the recommendations."""
    try:
        options = options_from(request.POST)
        run = recommendations_replay(user=request.user, options=options)
    except ValidationError as exc:
        return _back(request, exc.message_dict)
    except TraceError as exc:
        return _back(request, exc.problems)
    return redirect("trace-replay-detail", pk=run.pk)
