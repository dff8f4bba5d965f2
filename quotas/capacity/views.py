"""Pages of capacity requests: list, form, detail with decision and comments."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.listing import csv_response, sort_from, wants_csv
from portal.pages.access import signed_in, user_scope
from quotas.capacity import services
from quotas.capacity.filters import CapacityRequestFilter
from quotas.capacity.forms import CapacityRequestForm, CommentForm, DecisionForm
from quotas.capacity.selectors import capacity_requests_visible
from quotas.models import Queue


def _form_errors(form, exc: ValidationError) -> None:  # type: ignore[no-untyped-def]
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


# The list's sortable columns (?sort=col / -col) and its CSV columns (?format=csv).
CAPACITY_SORT = {"id": ("id",), "queue": ("queue__path",), "key": ("flavor__name", "resource"),
                 "min": ("min",), "max": ("max",), "starts": ("starts_at",),
                 "state": ("state",), "by": ("requested_by__username",),
                 "created": ("created_at",)}
CAPACITY_CSV = ("id", "queue", "flavor", "resource", "min", "max", "starts_at", "ends_at",
                "state", "requested_by", "decided_by", "decided_at", "created_at")


def _iso(value: Any) -> str:
    return value.isoformat() if value is not None else ""


@login_required
def capacity_request_list(request: HttpRequest) -> HttpResponseBase:
    """Capacity requests the user may see, filterable (same FilterSet as the API), sortable
    (?sort=) and as CSV (?format=csv)."""
    qs = capacity_requests_visible(request.user).order_by("-created_at", "-id")
    filterset = CapacityRequestFilter(request.GET, queryset=qs)
    sort = sort_from(request, CAPACITY_SORT, "-created")
    rows = filterset.qs
    if "ordering" not in request.GET or "sort" in request.GET:
        rows = rows.order_by(*sort.order_by(), "-id")
    if wants_csv(request) and not sort.error:
        return csv_response("capacity-requests.csv", CAPACITY_CSV, (
            (r.pk, r.queue.path, r.flavor.name, r.resource, r.min, r.max, _iso(r.starts_at),
             _iso(r.ends_at), r.state, r.requested_by.username,
             r.decided_by.username if r.decided_by else "", _iso(r.decided_at),
             _iso(r.created_at))
            for r in rows.iterator(chunk_size=2000)))
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    return render(request, "capacity/list.html", {"filter": filterset, "page": page,
                                                  "sort": sort},
                  status=400 if sort.error else 200)


@login_required
def capacity_request_new(request: HttpRequest) -> HttpResponse:
    """File a capacity request."""
    scope = user_scope(request.user)
    queues = Queue.objects.all() if scope.is_admin else Queue.objects.filter(
        pk__in=scope.visible_queue_ids
    )
    form = CapacityRequestForm(request.POST or None, queues=queues,
                               initial={"queue": request.GET.get("queue")})
    if request.method == "POST" and form.is_valid():
        try:
            created = services.capacity_request_submit(user=signed_in(request.user),
                                                       **form.cleaned_data)
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, f"Capacity request #{created.pk} submitted.")
            return redirect("capacity-request-detail", pk=created.pk)
    return render(request, "capacity/form.html", {"form": form})


@login_required
def capacity_request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One request: state, the change, its comments and the decision."""
    obj = get_object_or_404(
        capacity_requests_visible(request.user).prefetch_related("events__actor"), pk=pk
    )
    scope = user_scope(request.user)
    current = services._entry(obj)
    can_decide = obj.is_open and scope.can_decide(obj.queue_id)
    # The decider sees before deciding whether the tree would accept the change, and why not.
    check = None
    if can_decide:
        errors, warnings = services.tree_check_entry(
            queue=obj.queue, flavor=obj.flavor, resource=obj.resource,
            values=services._requested_values(obj, current))
        check = {"errors": errors, "warnings": warnings}
    # "Before": the entry as it was when the change was applied (kept in `previous`), else
    # as it is now; so an applied request reads "min 8 -> 16", not "16 -> 16".
    before = obj.previous if obj.previous is not None else services._entry_values(current)
    return render(request, "capacity/detail.html", {
        "obj": obj, "current": current, "check": check, "before": before,
        "can_decide": can_decide,
        "can_cancel": obj.state in ("submitted", "approved") and (
            obj.requested_by_id == request.user.pk or scope.can_decide(obj.queue_id)),
        "decision_form": DecisionForm(), "comment_form": CommentForm(),
    })


@login_required
@require_POST
def capacity_request_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Approve, deny, cancel or comment, then back to the request's page."""
    obj = get_object_or_404(capacity_requests_visible(request.user), pk=pk)
    try:
        if action == "comment":
            comment_form = CommentForm(request.POST)
            if not comment_form.is_valid():
                raise ValidationError({"message": ["the comment is empty"]})
            services.capacity_request_comment(
                user=signed_in(request.user), request=obj,
                message=comment_form.cleaned_data["message"])
        elif action == "cancel":
            services.capacity_request_cancel(user=signed_in(request.user), request=obj)
        else:
            comment = request.POST.get("comment", "")
            if action == "approve":
                services.capacity_request_approve(user=signed_in(request.user), request=obj,
                                                  comment=comment)
            elif action == "deny":
                services.capacity_request_deny(user=signed_in(request.user), request=obj,
                                               comment=comment)
            else:
                raise ValidationError(f"unknown action {action!r}")
    except ValidationError as exc:
        messages.error(request, f"{action.capitalize()} refused: " + "; ".join(exc.messages))
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        done = {"approve": "approved", "deny": "denied", "cancel": "cancelled",
                "comment": "comment added"}[action]
        messages.success(request, f"Request #{obj.pk}: {done}.")
    nxt = request.POST.get("next", "")
    if nxt.startswith("/") and not nxt.startswith("//"):
        return redirect(nxt)
    return redirect("capacity-request-detail", pk=obj.pk)
