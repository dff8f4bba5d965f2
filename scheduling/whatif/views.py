"""What-if pages: the form (quota, nodes, clusters, strategy changes and the hours to replay),
the run with its progress (htmx polls it) and both sides side by side, and the scenario
downloads."""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.pages.access import plan_scope
from quotas.models import Flavor, Queue
from scheduling.models import Cluster, WhatIf
from scheduling.replay.checker import STRATEGIES
from scheduling.whatif.api import scenario_file, what_if_visible
from scheduling.whatif.build import WhatIfError
from scheduling.whatif.services import what_if_start


def _num(post: Any, name: str) -> float | None:
    raw = (post.get(name) or "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError as exc:
        raise WhatIfError({name: [f"{raw!r} is not a number"]}) from exc


def changes_from_form(post: Any) -> dict[str, Any]:
    """The form's fields as the API's `changes`; blank fields change nothing."""
    changes: dict[str, Any] = {}
    queue, flavor = post.get("queue", ""), post.get("flavor", "")
    quota = {f: v for f in ("min", "max", "lendable") if (v := _num(post, f)) is not None}
    if queue and quota:
        changes["quotas"] = [{"queue": queue, "flavor": flavor, "resource": "gpu", **quota}]
    add = _num(post, "add_count")
    if add:
        changes["add_nodes"] = [{"cluster": post.get("add_cluster") or "new", "flavor": flavor,
                                 "count": int(add), "gpus": int(_num(post, "add_gpus") or 8)}]
    if post.get("drain_cluster"):
        drain: dict[str, Any] = {"cluster": post["drain_cluster"]}
        count = _num(post, "drain_count")
        if count:
            drain.update(flavor=flavor, count=int(count))
        changes["drain"] = [drain]
    if post.get("strategy"):
        changes["strategy"] = post["strategy"]
    text = (post.get("policy") or "").strip()
    if text:
        try:
            policy = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise WhatIfError({"policy": [f"not YAML: {exc}"]}) from exc
        if not isinstance(policy, dict):
            raise WhatIfError({"policy": ["one policy definition (a mapping) is expected"]})
        changes["policies"] = [policy]
    return changes


@login_required
def what_if_page(request: HttpRequest) -> HttpResponse:
    """The form and the user's earlier what-ifs; a POST starts one and shows it."""
    scope = plan_scope(request.user)
    if not scope.allowed:
        raise PermissionDenied("what-if is for admins and team leads")
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        try:
            hours = _num(request.POST, "hours") or 24
            run = what_if_start(user=request.user, data={
                "hours": hours, "repeat_past": request.POST.get("repeat_past") == "on",
                "changes": changes_from_form(request.POST)})
            return redirect("what-if-detail", pk=run.pk)
        except WhatIfError as exc:
            errors = exc.problems
    queues = [q for q in Queue.objects.order_by("path").values("id", "path")
              if scope.can_plan(q["id"])]
    return render(request, "scheduling/whatif.html", {
        "errors": errors, "post": request.POST, "queues": queues, "is_admin": scope.is_admin,
        "flavors": list(Flavor.objects.order_by("name").values_list("name", flat=True)),
        "clusters": list(Cluster.objects.filter(enabled=True).order_by("name")
                         .values_list("name", flat=True)),
        "strategies": STRATEGIES,
        "runs": WhatIf.objects.filter(owner_id=request.user.pk)[:20],
    }, status=400 if errors else 200)


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per queue, both sides' figures in one row."""
    base, changed = result["baseline"]["queues"], result["changed"]["queues"]
    return [{"queue": q, "base": base.get(q, {}), "changed": changed.get(q, {})}
            for q in sorted(set(base) | set(changed))]


@login_required
def what_if_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A what-if: its progress while it runs (the partial polls), then both sides."""
    run = what_if_visible(request.user, pk)
    context = {"run": run, "rows": _rows(run.result) if run.result else [],
               "sides": ("baseline", "changed")}
    partial = bool(getattr(request, "htmx", False))
    return render(request, "scheduling/partials/whatif_result.html" if partial
                  else "scheduling/whatif_detail.html", context)


@login_required
def what_if_download(request: HttpRequest, pk: int) -> HttpResponse:
    """One side's scenario file, for `manage.py simulate`."""
    return scenario_file(what_if_visible(request.user, pk),
                         request.GET.get("variant", "changed"))
