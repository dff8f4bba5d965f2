"""Portal pages: dashboard, approval inbox, quota tree (view and editor), queue charts, fleet."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.listing import csv_response, sort_from, wants_csv
from core.quantity import unit
from portal.pages import charts
from portal.pages import selectors as page_selectors
from portal.pages.access import user_scope
from portal.pages.tree_editor import editor_apply, editor_keys, editor_rows
from quotas import selectors as tree_selectors
from quotas import services as tree_services
from quotas.capacity.selectors import capacity_requests_to_decide
from quotas.models import Queue, Team
from scheduling.kinds import kind_names
from scheduling.models import Cluster
from scheduling.request import approvals

INBOX_ROWS = 50  # oldest first: decide these, the next ones follow
# The inbox's sortable columns: capacity requests (?rsort=) and held workloads (?sort=).
REQUEST_SORT = {"id": ("id",), "queue": ("queue__path",), "by": ("requested_by__username",),
                "starts": ("starts_at",), "created": ("created_at",)}
HELD_SORT = {"name": ("name",), "queue": ("queue__path",), "owner": ("owner__username",),
             "duration": ("duration_hint_s",), "submitted": ("submitted_at",)}


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """A researcher's start page: their queues' standing, their work, fleet headroom."""
    scope = user_scope(request.user)
    as_of = timezone.now()  # the time of the data: read before the figures
    queues = page_selectors.dashboard_queues(user=request.user, scope=scope)
    counts = page_selectors.pending_counts([q["id"] for q in queues])
    for q in queues:
        q["pending_count"] = counts.get(q["id"], 0)
    # htmx refreshes the standing every few seconds: it gets the body only.
    htmx = bool(getattr(request, "htmx", False))  # django-htmx's middleware sets it
    template = "portal/partials/dashboard_body.html" if htmx else "portal/dashboard.html"
    # Month-to-date cost cards change hourly: the full page only, not the 10 s refresh.
    teams = [] if template != "portal/dashboard.html" else list(
        Team.objects.filter(members__pk=request.user.pk).order_by("name"))  # type: ignore[misc]
    return render(request, template, {
        "teams": teams,
        "queues": queues,
        "own_queues": any(q["can_submit"] for q in queues),
        "workloads": page_selectors.my_live_workloads(user=request.user),
        "headroom": page_selectors.fleet_headroom(),
        "scope": scope, "as_of": as_of,
    })


@login_required
def approval_inbox(request: HttpRequest) -> HttpResponseBase:
    """Capacity requests and held workloads the user may decide."""
    scope = user_scope(request.user)
    max_gpus, max_hours = approvals.approval_thresholds()
    rsort = sort_from(request, REQUEST_SORT, "created", param="rsort")
    sort = sort_from(request, HELD_SORT, "submitted")
    requests = capacity_requests_to_decide(request.user, scope=scope).order_by(
        *rsort.order_by(), "id")
    workloads = page_selectors.workloads_to_decide(scope, user=request.user).order_by(
        *sort.order_by(), "id")
    error = rsort.error or sort.error
    if wants_csv(request):
        table = request.GET.get("table", "")
        if table not in ("requests", "workloads"):
            error = error or (f"table: {table!r} is not a table of this page; one of requests, "
                              "workloads")
        elif not error:
            return _inbox_csv(table, requests, workloads)
    return render(request, "portal/approvals.html", {
        "sort": sort, "rsort": rsort, "sort_error": error,
        "requests": list(requests[:INBOX_ROWS]), "requests_total": requests.count(),
        "workloads": list(workloads[:INBOX_ROWS]), "workloads_total": workloads.count(),
        "inbox_rows": INBOX_ROWS,
        "scope": scope, "max_gpus": max_gpus, "max_hours": max_hours,
    }, status=400 if error else 200)


def _inbox_csv(table: str, requests: Any, workloads: Any) -> HttpResponseBase:
    if table == "requests":
        return csv_response("capacity-requests.csv", (
            "id", "queue", "flavor", "resource", "min", "max", "starts_at", "ends_at",
            "requested_by", "created_at"), (
            (r.pk, r.queue.path, r.flavor.name, r.resource, r.min, r.max, r.starts_at,
             r.ends_at, r.requested_by.username, r.created_at.isoformat())
            for r in requests.iterator(chunk_size=2000)))
    return csv_response("held-workloads.csv", (
        "id", "name", "queue", "owner", "gpus", "duration_hint_s", "submitted_at"), (
        (w.pk, w.name, w.queue.path, w.owner.username, w.gpus, w.duration_hint_s,
         w.submitted_at.isoformat()) for w in workloads.iterator(chunk_size=2000)))


@login_required
@require_POST
def workload_decision(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Approve or deny a held workload from the inbox."""
    scope = user_scope(request.user)
    workload = page_selectors.workloads_to_decide(scope).filter(pk=pk).first()
    if workload is None or action not in ("approve", "deny"):
        raise Http404("no such workload waiting for your approval")
    comment = request.POST.get("comment", "")
    try:
        if action == "approve":
            approvals.workload_approve(user=request.user, workload=workload, comment=comment)
        else:
            approvals.workload_deny(user=request.user, workload=workload, comment=comment)
    except (ValidationError, PermissionDenied) as exc:
        text = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, f"{action.capitalize()} refused: {text}")
    else:
        messages.success(request, f"{workload.name}: {action}d.")
    return redirect("approval-inbox")


def _tree_context(request: HttpRequest, state: Any = None, post: Any = None) -> dict[str, Any]:
    specs = state.specs if state is not None else tree_selectors.tree_specs()
    scope = user_scope(request.user)
    keys = editor_keys(specs)
    rows = editor_rows(specs, keys, post, editable=scope.is_admin,
                       visible=None if scope.is_admin else scope.can_see_queue)
    unplaced = []
    if state is not None:
        for row in rows:
            row["problems"] = state.problems_for(row["path"])
        unplaced = state.unplaced({row["path"] for row in rows})
    headers = [(f"{k[0]}/{k[1]}", unit(k[1])) for k in keys]
    return {"rows": rows, "keys": keys, "headers": headers, "state": state,
            "can_edit": scope.is_admin, "unplaced": unplaced,
            "parents": Queue.objects.order_by("path").only("id", "path"), "scope": scope}


@login_required
def queue_tree(request: HttpRequest) -> HttpResponse:
    """The tree with min/max/lendable per key; admins edit it in place."""
    scope = user_scope(request.user)
    if request.method == "POST":
        if not scope.is_admin:
            raise PermissionDenied("only platform admins edit the tree")
        state = editor_apply(request.POST)
        if state.ok and state.changed:
            try:
                result = tree_services.tree_replace(queues=[
                    tree_services.QueueDef(path=path, quota=state.specs[path].quota,
                                           **_kept(path))
                    for path in state.changed
                ])
            except ValidationError as exc:
                for message in exc.messages:
                    state.errors.setdefault("(tree)", []).append(message)
            else:
                messages.success(request, f"Saved {len(state.changed)} queue(s): "
                                 f"{', '.join(state.changed)}.")
                for w in result.warnings:
                    messages.warning(request, w)
                return redirect("queue-tree")
        elif state.ok:
            messages.info(request, "Nothing changed.")
            return redirect("queue-tree")
        return render(request, "portal/queue_tree.html",
                      _tree_context(request, state, request.POST), status=400)
    return render(request, "portal/queue_tree.html", _tree_context(request))


def _kept(path: str) -> dict[str, str]:
    q = Queue.objects.get(path=path)
    return {"strategy": q.strategy, "namespace": q.namespace, "description": q.description}


@login_required
@require_POST
def queue_tree_check(request: HttpRequest) -> HttpResponse:
    """htmx: the problems the edited tree would have, shown before saving."""
    if not user_scope(request.user).is_admin:
        raise PermissionDenied("only platform admins edit the tree")
    state = editor_apply(request.POST)
    ids = dict(Queue.objects.values_list("path", "id"))
    cells = [{"id": qid, "problems": state.problems_for(path)} for path, qid in ids.items()]
    return render(request, "portal/partials/tree_problems.html",
                  {"state": state, "cells": cells, "unplaced": state.unplaced(set(ids))})


@login_required
@require_POST
def queue_add(request: HttpRequest) -> HttpResponse:
    """Add a queue under a parent (admins), through the tree service."""
    if not user_scope(request.user).is_admin:
        raise PermissionDenied("only platform admins edit the tree")
    parent_id = request.POST.get("parent") or ""
    parent = None
    if parent_id:
        parent = (Queue.objects.filter(pk=int(parent_id)).first()
                  if parent_id.isascii() and parent_id.isdigit() else None)
        if parent is None:
            messages.error(request, f"Queue not added: no parent queue with id {parent_id!r}")
            return redirect("queue-tree")
    try:
        change = tree_services.queue_create(name=request.POST.get("name", "").strip(),
                                            parent=parent)
    except ValidationError as exc:
        messages.error(request, "Queue not added: " + "; ".join(exc.messages))
    else:
        assert change.queue is not None  # a create always returns the new queue
        messages.success(request, f"Added {change.queue.path}.")
        for w in change.warnings:
            messages.warning(request, w)
    return redirect("queue-tree")


@login_required
@require_POST
def queue_remove(request: HttpRequest, pk: int) -> HttpResponse:
    """Delete an empty queue (admins), through the tree service."""
    if not user_scope(request.user).is_admin:
        raise PermissionDenied("only platform admins edit the tree")
    queue = Queue.objects.filter(pk=pk).first()
    if queue is None:
        raise Http404("no such queue")
    try:
        tree_services.queue_delete(queue=queue)
    except ValidationError as exc:
        messages.error(request, "Queue not removed: " + "; ".join(exc.messages))
    else:
        messages.success(request, f"Removed {queue.path}.")
    return redirect("queue-tree")


@login_required
def queue_detail(request: HttpRequest, path: str) -> HttpResponse:
    """One queue: quotas and usage per key, charts over 24 h and 30 days."""
    scope = user_scope(request.user)
    queue = Queue.objects.filter(path=path).first()
    if queue is None or not scope.can_see_queue(queue.pk):
        raise Http404("no such queue")
    node = tree_selectors.queue_tree(user=request.user, root=queue.path)[0]
    now = timezone.now()
    spans = (("24 h", timedelta(hours=24), timedelta(minutes=30)),
             ("30 days", timedelta(days=30), timedelta(hours=12)))
    # One query for the longest window; each chart keeps the intervals overlapping its own.
    intervals = page_selectors.queue_usage_intervals(
        path=queue.path, start=now - max(span for _, span, _ in spans), end=now)
    figures = []
    for flavor, resources in node["quota"].items():
        cell = resources.get("gpu")
        if cell is None:
            continue
        for label, span, step in spans:
            series = page_selectors.usage_series(
                intervals.get(flavor, []), start=now - span, end=now, step=step)
            figures.append({
                "id": f"chart-{flavor}-{label.replace(' ', '')}",
                "data_id": f"chart-{flavor}-{label.replace(' ', '')}-data",
                "title": f"{flavor} GPUs, last {label}",
                "json": charts.queue_usage_figure(
                    series, title=f"{queue.path} {flavor} GPUs, last {label}",
                    qmin=cell["min"], qmax=cell["max"]),
            })
    from scheduling.selectors import queue_pending

    return render(request, "portal/queue_detail.html", {
        "queue": queue, "node": node, "figures": figures,
        "pending": queue_pending(user=request.user, path=queue.path),
        "can_submit": scope.can_submit_to(queue.pk) and node["is_leaf"], "scope": scope,
    })


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Clusters with capacity, used and health per GPU model; allocation and waits charts."""
    now = timezone.now()
    scope = user_scope(request.user)
    allocation = page_selectors.cluster_allocation_series(
        start=now - timedelta(hours=24), end=now, step=timedelta(minutes=30))
    waits = page_selectors.queue_waits(
        start=now - timedelta(days=7), now=now,
        queue_ids=None if scope.is_admin else scope.visible_queue_ids)
    clusters = tree_selectors.cluster_list()
    for cluster in clusters:
        cluster["kind_names"] = kind_names(cluster["workload_kinds"])
    return render(request, "portal/fleet.html", {
        "clusters": clusters, "shared": page_selectors.shared_cards(),
        "figures": [
            {"id": "chart-allocation", "data_id": "chart-allocation-data",
             "title": "Allocation over the last 24 h",
             "json": charts.cluster_allocation_figure(allocation)},
            {"id": "chart-waits", "data_id": "chart-waits-data",
             "title": "Waits per queue (last 7 days)",
             "json": charts.queue_waits_figure(waits)},
        ],
        "waits": waits, "scope": scope,
    })


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One cluster with its nodes."""
    found = tree_selectors.cluster_list(name=name)
    if not found:
        raise Http404("no such cluster")
    return render(request, "portal/cluster_detail.html", {
        "cluster": found[0],
        # Its History section lists the cluster's and its nodes' changes by id.
        "cluster_pk": Cluster.objects.filter(name=name).values_list("pk", flat=True).first(),
    })


@login_required
def borrowing(request: HttpRequest) -> HttpResponse:
    """Who lends to whom now: per GPU model, each sibling group's borrowers and lenders."""
    return render(request, "portal/borrowing.html", {
        "groups": page_selectors.borrowing_now(scope=user_scope(request.user)),
        "as_of": timezone.now()})
