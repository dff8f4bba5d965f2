"""The request page's "from a manifest" tab: paste or upload a manifest, see the pod sets
Allot derives from it and whether and when it could run, then submit it (the same service as
POST /api/v1/workloads)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from scheduling import services
from scheduling.manifest_form import ManifestRequestForm
from scheduling.request.preview import workload_preview


def _form(request: HttpRequest, bound: bool) -> ManifestRequestForm:
    queues = services.user_leaf_queues(request.user).order_by("path")
    initial = {"queue": request.GET.get("queue")} if request.GET.get("queue") else {}
    if not bound:
        return ManifestRequestForm(queues=queues, initial=initial)
    return ManifestRequestForm(request.POST, request.FILES, queues=queues)


@login_required
def workload_new_manifest(request: HttpRequest) -> HttpResponse:
    """The manifest tab; on submit, the workload is submitted as the API would."""
    form = _form(request, request.method == "POST")
    if request.method == "POST" and form.is_valid():
        preview = workload_preview(queue=form.cleaned_data["queue"],
                                   submission=form.preview_submission(), now=timezone.now())
        if preview.impossible:
            for verdict in preview.flavors:
                for code, message in verdict.reasons:
                    form.add_error(None, f"{verdict.flavor}: {code}: {message}")
            return render(request, "scheduling/workload_manifest_form.html", {"form": form},
                          status=400)
        try:
            workload = services.workload_submit(user=request.user, data=form.as_submission())
        except ValidationError as exc:
            errors = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
            for key, msgs in errors.items():
                form.add_error(None, [f"{key}: {m}" if key else m for m in msgs])
        else:
            if workload.state == "rejected":
                messages.error(request, f"{workload.name} was rejected: "
                               f"{workload.reason_message}")
            else:
                messages.success(request, f"{workload.name} submitted.")
            return redirect("workload-detail", pk=workload.pk)
    return render(request, "scheduling/workload_manifest_form.html", {"form": form},
                  status=400 if request.method == "POST" else 200)


@login_required
@require_POST
def workload_check_manifest(request: HttpRequest) -> HttpResponse:
    """htmx: the derived pod sets and the live feasibility (nothing is saved)."""
    form = _form(request, True)
    preview = None
    if form.is_valid():
        preview = workload_preview(queue=form.cleaned_data["queue"],
                                   submission=form.preview_submission(), now=timezone.now())
    return render(request, "scheduling/partials/manifest_feedback.html",
                  {"form": form, "preview": preview})
