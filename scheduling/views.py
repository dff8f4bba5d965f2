"""Workload pages: request GPUs (with live feedback), my workloads, the workload page."""

from __future__ import annotations

from typing import Any

import django_filters
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.listing import csv_response, sort_from, wants_csv
from scheduling import selectors, services
from scheduling.filters import WorkloadFilter
from scheduling.forms import (
    PodSetFormSet,
    WorkloadRequestForm,
    form_initial_from,
    pod_set_formset,
    submission_errors_to_form,
)
from scheduling.models import OPEN_STATES, TERMINAL_STATES, WorkloadState
from scheduling.reasons import reason_plain
from scheduling.request.preview import advertised_resources, workload_preview
from scheduling.sessions import session_connect, session_idle_state

# htmx stops polling on this status (the content is still swapped in): sent once a live
# page or table has nothing left that can change.
STOP_POLLING = 286
# The list's sortable columns (?sort=col / -col) and its CSV columns (?format=csv).
WORKLOAD_SORT = {"name": ("name",), "queue": ("queue__path",), "owner": ("owner__username",),
                 "state": ("state",), "priority": ("priority_class__value",),
                 "submitted": ("submitted_at",)}
WORKLOAD_CSV = ("id", "name", "queue", "owner", "state", "gpus", "gpu_model", "priority_class",
                "submitted_at", "reason_code")


class WorkloadPageFilter(WorkloadFilter):
    """The API's WorkloadFilter, plus what a person sorts and narrows a page by."""

    # The same states; without DISTINCT, which a one-row-per-workload filter does not need
    # and which makes PostgreSQL sort the whole table (bench/portal.py measures the page).
    state = django_filters.MultipleChoiceFilter(choices=WorkloadState.choices, distinct=False)
    flavor = django_filters.CharFilter(method="filter_flavor", label="GPU model")
    owner = django_filters.CharFilter(field_name="owner__username", label="Owner (username)")
    submitted_after = django_filters.DateFilter(field_name="submitted_at", lookup_expr="date__gte",
                                                label="Submitted from")
    submitted_before = django_filters.DateFilter(field_name="submitted_at",
                                                 lookup_expr="date__lte", label="Submitted to")
    ordering = django_filters.OrderingFilter(
        fields=(("submitted_at", "submitted"), ("name", "name"), ("state", "state"),
                ("queue__path", "queue")),
        label="Sort by",
    )

    class Meta(WorkloadFilter.Meta):
        fields = [*WorkloadFilter.Meta.fields]

    def filter_flavor(self, queryset, name, value):  # type: ignore[no-untyped-def]
        return queryset.filter(pod_sets__index=0, pod_sets__flavors__contains=[value])


@login_required
def workload_list(request: HttpRequest) -> HttpResponseBase:
    """The workloads the user may see, filterable and sortable."""
    as_of = timezone.now()  # the time of the data: read before the rows
    qs = selectors.workload_list(user=request.user)
    filterset = WorkloadPageFilter(request.GET, queryset=qs, request=request)
    sort = sort_from(request, WORKLOAD_SORT, "-submitted")
    rows = filterset.qs
    if "ordering" not in request.GET or "sort" in request.GET:
        rows = rows.order_by(*sort.order_by(), "-id")
    if wants_csv(request) and not sort.error:
        return csv_response("workloads.csv", WORKLOAD_CSV, (
            (w.pk, w.name, w.queue.path, w.owner.username, w.state, w.gpus,
             next((",".join(ps.flavors) for ps in w.pod_sets.all()), ""),
             w.priority_class.name, w.submitted_at.isoformat(), w.reason_code)
            for w in rows.iterator(chunk_size=2000)))
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    # Polled while a listed workload can still change (pending or holding capacity); the poll
    # stops once every row has ended. htmx gets the table only.
    live = any(w.state in OPEN_STATES for w in page)
    htmx = bool(getattr(request, "htmx", False))
    template = ("scheduling/partials/workload_table.html" if htmx
                else "scheduling/workload_list.html")
    return render(request, template, {"filter": filterset, "page": page, "live": live,
                                      "as_of": as_of, "sort": sort},
                  status=400 if sort.error else (STOP_POLLING if htmx and not live else 200))


def _form(request: HttpRequest, data: Any = None,
          initial: dict[str, Any] | None = None) -> WorkloadRequestForm:
    queues = services.user_leaf_queues(request.user).order_by("path")
    if initial is None:
        initial = {"queue": request.GET.get("queue")} if request.GET.get("queue") else {}
    return WorkloadRequestForm(data, queues=queues, initial=initial)


def _valid(form: WorkloadRequestForm, pod_sets: PodSetFormSet) -> bool:
    # Both validated (not short-circuited), so every error shows at once.
    form_ok = form.is_valid()
    return pod_sets.is_valid() and form_ok


def _advertised() -> dict[str, Any]:
    advertised = advertised_resources()
    names = sorted({o.name for offers in advertised.values() for o in offers})
    return {"advertised": advertised, "advertised_names": names}


@login_required
def workload_new(request: HttpRequest) -> HttpResponse:
    """The request-GPUs form; on submit, the same service as POST /api/v1/workloads.

    "Add a pod set" posts the form back and gets it again, as typed, with one more row (it
    works without JavaScript); a row's "Remove" box leaves that pod set out.
    """
    if request.method == "POST" and "add_pod_set" in request.POST:
        form = _form(request, initial=form_initial_from(request.POST, WorkloadRequestForm))
        pod_sets = pod_set_formset(request.POST, add=True)
        return render(request, "scheduling/workload_form.html",
                      {"form": form, "pod_sets": pod_sets, **_advertised()})
    form = _form(request, request.POST or None)
    pod_sets = pod_set_formset(request.POST or None)
    # The extended resources the fleet's nodes advertise, per flavor: the row's field suggests
    # their names, and the page lists them (the live check says what the chosen model has).
    context = {"form": form, "pod_sets": pod_sets, **_advertised()}
    if request.method == "POST" and _valid(form, pod_sets):
        submission = form.as_submission(pod_sets.pod_sets())
        # A request that can never run is refused here, with the reasons, and not recorded
        # (the API records it as rejected instead, so automation can read why).
        preview = workload_preview(queue=form.cleaned_data["queue"],
                                   submission=submission, now=timezone.now())
        if preview.impossible:
            for verdict in preview.flavors:
                for code, message in verdict.reasons:
                    plain = reason_plain(code, message).text
                    form.add_error(None, f"{verdict.flavor}: {plain} ({code}: {message})")
            return render(request, "scheduling/workload_form.html", context, status=400)
        try:
            workload = services.workload_submit(user=request.user, data=submission)
        except ValidationError as exc:
            submission_errors_to_form(form, exc.message_dict if hasattr(exc, "error_dict")
                                      else {"__all__": exc.messages}, pod_sets)
        else:
            if workload.state == "rejected":
                messages.error(request, f"{workload.name} was rejected: "
                               f"{workload.reason_message}")
            else:
                messages.success(request, f"{workload.name} submitted.")
            return redirect("workload-detail", pk=workload.pk)
    return render(request, "scheduling/workload_form.html", context)


@login_required
@require_POST
def workload_check(request: HttpRequest) -> HttpResponse:
    """htmx: live feedback on the form as the user types (nothing is saved)."""
    form = _form(request, request.POST)
    pod_sets = pod_set_formset(request.POST)
    preview = None
    if _valid(form, pod_sets) and _name_free(form):
        preview = workload_preview(queue=form.cleaned_data["queue"],
                                   submission=form.as_submission(pod_sets.pod_sets()),
                                   now=timezone.now())
    return render(request, "scheduling/partials/feedback.html",
                  {"form": form, "pod_sets": pod_sets, "preview": preview})


def _name_free(form: WorkloadRequestForm) -> bool:
    """The live check flags a name an open workload of the queue holds (the submission would
    be refused with the same words)."""
    holder = selectors.open_workload_named(queue=form.cleaned_data["queue"],
                                           name=form.cleaned_data["name"])
    if holder is None:
        return True
    form.add_error("name", f"a workload named {holder.name!r} is already {holder.state} in "
                   f"{form.cleaned_data['queue'].path} (#{holder.pk}): names are unique among "
                   "a queue's open workloads; pick another name, or wait until it ends")
    return False


def _live_context(request: HttpRequest, pk: int) -> dict[str, Any]:
    as_of = timezone.now()  # the time of the data: read before the workload
    workload = selectors.workload_get(user=request.user, pk=pk)
    if workload is None:
        raise Http404("no such workload")
    admission = selectors.workload_current_admission(workload)
    reasons = selectors.workload_reasons(workload)
    live = workload.state not in TERMINAL_STATES
    return {
        "w": workload, "admission": admission, "live": live, "as_of": as_of,
        "position": selectors.workload_queue_position(workload),
        "current_reason": ({"code": workload.reason_code, "message": workload.reason_message}
                           if workload.reason_code else None),
        "reasons": reasons[-5:],
        "events": list(workload.events.all()),
        "pods": selectors.workload_pods(workload, admission),
        "pod_sets": list(workload.pod_sets.all()),
        "gap": selectors.workload_wait_gap(workload),
        "gpus": sum(ps.count * ps.gpus for ps in workload.pod_sets.all()),
        "can_cancel": live and services.user_may_manage(request.user, workload),
        "idle": session_idle_state(workload),
        "connect": session_connect(workload) if workload.interactive and admission
        and not admission.ended_at else "",
    }


@login_required
def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A workload: state, place in queue, reasons, timeline; polls while it is live."""
    return render(request, "scheduling/workload_detail.html", _live_context(request, pk))


@login_required
def workload_live(request: HttpRequest, pk: int) -> HttpResponse:
    """htmx: the live part of the workload page; once it ended, without the poll trigger and
    with status 286, so htmx stops polling (nothing on it can change any more)."""
    context = _live_context(request, pk)
    return render(request, "scheduling/partials/workload_live.html", context,
                  status=200 if context["live"] else STOP_POLLING)


@login_required
@require_POST
def workload_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel, through the same service as the API."""
    workload = selectors.workload_get(user=request.user, pk=pk)
    if workload is None:
        raise Http404("no such workload")
    try:
        services.workload_cancel(user=request.user, workload=workload)
    except (ValidationError, PermissionDenied) as exc:
        text = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, f"Cancel refused: {text}")
    else:
        messages.success(request, f"{workload.name} cancelled.")
    return redirect("workload-detail", pk=pk)
