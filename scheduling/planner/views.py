"""Trace replay pages: the upload form with the tree's quotas to edit (the proposal), the
replay with its progress (htmx polls it) and the three sides with their plots, the scenario
downloads."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.pages.access import plan_scope
from quotas.models import Flavor, QuotaEntry
from scheduling.models import TraceReplay
from scheduling.planner.api import scenario_file, trace_replay_visible
from scheduling.planner.charts import LABELS, figures
from scheduling.planner.services import trace_replay_start
from scheduling.planner.traces import TraceError
from scheduling.planner.variants import VARIANTS


def quota_rows(scope: Any) -> list[dict[str, Any]]:
    """The quota entries of the queues the user may plan for (a lead: their subtree), as the
    editable rows of the proposal."""
    rows = []
    for e in QuotaEntry.objects.select_related("queue", "flavor").order_by(
            "queue__path", "flavor__name", "resource"):
        if scope.can_plan(e.queue_id):
            key = f"{e.queue.path}|{e.flavor.name}|{e.resource}"
            rows.append({"key": key, "queue": e.queue.path, "flavor": e.flavor.name,
                         "resource": e.resource, "min": e.min, "max": e.max})
    return rows


def changes_from_form(post: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The edited min and max of each row that differs from the tree as it is."""
    quotas: list[dict[str, Any]] = []
    problems: dict[str, list[str]] = {}
    for r in rows:
        change: dict[str, Any] = {}
        for f in ("min", "max"):
            raw = (post.get(f"{f}:{r['key']}") or "").strip()
            if not raw:
                continue
            try:
                value = Decimal(raw)
            except InvalidOperation:
                problems[f"{r['queue']} {r['flavor']}/{r['resource']} {f}"] = [
                    f"{raw!r} is not a number"]
                continue
            if r[f] is None or value != r[f]:
                change[f] = float(value)
        if change:
            quotas.append({"queue": r["queue"], "flavor": r["flavor"],
                           "resource": r["resource"], **change})
    if problems:
        raise TraceError(problems)
    return {"quotas": quotas} if quotas else {}


@login_required
def trace_replay_page(request: HttpRequest) -> HttpResponse:
    """The upload form and the user's earlier replays; a POST starts one and shows it."""
    scope = plan_scope(request.user)
    if not scope.allowed:
        raise PermissionDenied("the capacity planner is for admins and team leads")
    rows = quota_rows(scope)
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        upload = request.FILES.get("file")
        tree = request.FILES.get("tree")
        try:
            if upload is None:
                raise TraceError({"file": ["choose a trace file to upload"]})
            run = trace_replay_start(
                user=request.user, name=upload.name or "trace.csv", size=upload.size or 0,
                read=upload.read,
                flavor=request.POST.get("flavor") or None,
                changes=changes_from_form(request.POST, rows),
                tree_name=(tree.name or "") if tree is not None else "",
                tree_data=tree.read() if tree is not None else None)
            return redirect("trace-replay-detail", pk=run.pk)
        except TraceError as exc:
            errors = exc.problems
    post = request.POST
    for r in rows:
        r["min_value"] = post.get(f"min:{r['key']}", r["min"])
        r["max_value"] = post.get(f"max:{r['key']}", r["max"] if r["max"] is not None else "")
    return render(request, "scheduling/planner_replay.html", {
        "errors": errors, "post": post, "rows": rows, "is_admin": scope.is_admin,
        "flavors": list(Flavor.objects.order_by("name").values_list("name", flat=True)),
        "runs": TraceReplay.objects.filter(owner_id=request.user.pk).defer(
            "scenarios", "result", "upload")[:20],
    }, status=400 if errors else 200)


def result_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per queue, the three sides' figures in one row."""
    queues = sorted({q for side in result.values() for q in side["queues"]})
    return [{"queue": q, "sides": [result[v]["queues"].get(q, {}) for v in VARIANTS]}
            for q in queues]


@login_required
def trace_replay_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A trace replay: its progress while it runs (the partial polls), then the comparison."""
    run = trace_replay_visible(request.user, pk)
    result: dict[str, Any] = run.result or {}
    done = run.state == "done" and bool(result)
    context = {"run": run, "rows": result_rows(result) if done else [],
               "sides": [(v, LABELS[v], result[v]) for v in VARIANTS] if done else [],
               "figures": figures(result) if done else [], "variants": VARIANTS,
               "tenants": run.scenarios.get("current", {}).get("x-tenants"),
               "reading": not run.scenarios}
    partial = bool(getattr(request, "htmx", False))
    if partial and run.state in ("done", "failed"):
        # The charts are drawn on page load (static/js/charts.js): show the finished page.
        resp = HttpResponse(status=204)
        resp["HX-Refresh"] = "true"
        return resp
    return render(request, "scheduling/partials/planner_result.html" if partial
                  else "scheduling/planner_replay_detail.html", context)


@login_required
def trace_replay_download(request: HttpRequest, pk: int) -> HttpResponse:
    """One side's scenario file, for `manage.py simulate`."""
    return scenario_file(trace_replay_visible(request.user, pk),
                         request.GET.get("variant", "proposed"))
