"""Policy pages for platform admins: list, edit with live validation, try, replay, violations."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.permissions import is_platform_admin

from . import selectors, services
from .checks import definition_errors
from .filters import PolicyViolationFilter
from .forms import PolicyForm, TryForm
from .models import Policy
from .specs import check_fields, normalise, to_spec


def admin_required(view: Any) -> Any:
    """Signed-in platform admins only (others get 403)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_platform_admin(request.user):
            raise PermissionDenied("Only platform admins manage policies.")
        return view(request, *args, **kwargs)

    return wrapped


def _form_errors(form: PolicyForm, exc: ValidationError) -> None:
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


@admin_required
def policy_list(request: HttpRequest) -> HttpResponse:
    """Every policy with its kind, mode, scope, hits, denials and last change."""
    return render(request, "policies/list.html", {"policies": selectors.policy_list()})


def _initial(policy: Policy) -> dict[str, Any]:
    content = services.policy_content(policy)
    content["scope"] = "\n".join(policy.scope or [])
    return content


@admin_required
def policy_new(request: HttpRequest) -> HttpResponse:
    """Write a new policy (it starts in audit mode unless told otherwise)."""
    form = PolicyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            policy = services.policy_create(user=request.user, data=form.definition(),
                                            comment=form.cleaned_data["comment"])
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, f"Policy {policy.name} created (v1, {policy.mode}).")
            return redirect("policy-edit", name=policy.name)
    return render(request, "policies/edit.html", {"form": form, "policy": None,
                                                  "try_form": TryForm()})


@admin_required
def policy_edit(request: HttpRequest, name: str) -> HttpResponse:
    """Edit a policy; each saved change is a new version with its diff."""
    services.policy_counts_flush()  # this process's buffered hits show
    policy = get_object_or_404(Policy, name=name)
    form = PolicyForm(request.POST or None, initial=_initial(policy), editing=True)
    if request.method == "POST" and form.is_valid():
        try:
            updated = services.policy_update(user=request.user, policy=policy,
                                             data=form.definition(),
                                             comment=form.cleaned_data["comment"])
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            if updated.version == policy.version:
                messages.info(request, "Nothing changed.")
            else:
                messages.success(request, f"Policy {updated.name} saved as v{updated.version} "
                                 f"({updated.mode}).")
            return redirect("policy-edit", name=updated.name)
    return render(request, "policies/edit.html", {
        "form": form, "policy": policy, "try_form": TryForm(),
        "versions": selectors.policy_versions(policy)[:20],
        "recent": selectors.violation_list(policy=policy)[:10],
    })


def _definition_from_post(request: HttpRequest, policy: Policy | None) -> dict[str, Any]:
    base = services.policy_content(policy) if policy else {}
    data = {**base}
    for field in ("name", "description", "kind", "mode", "key", "match", "rule", "message"):
        if field in request.POST:
            data[field] = request.POST[field]
    if "scope" in request.POST:
        data["scope"] = [s.strip().strip("/") for s in
                         request.POST["scope"].replace(",", "\n").splitlines() if s.strip()]
    if "order" in request.POST:
        try:
            data["order"] = int(request.POST["order"])
        except ValueError:
            data["order"] = request.POST["order"]
    if policy is not None:
        data["name"] = policy.name
    return normalise(data)


@admin_required
@require_POST
def policy_validate(request: HttpRequest) -> HttpResponse:
    """htmx: check the form's fields as they are typed (errors with line and column)."""
    name = request.POST.get("policy_name", "")
    policy = Policy.objects.filter(name=name).first() if name else None
    errors = check_fields(_definition_from_post(request, policy))
    return render(request, "policies/partials/validation.html", {"errors": errors})


@admin_required
@require_POST
def policy_try(request: HttpRequest, name: str = "") -> HttpResponse:
    """htmx: evaluate the policy as typed (saved or not) on the sample request."""
    policy = Policy.objects.filter(name=name).first() if name else None
    definition = _definition_from_post(request, policy)
    errors = definition_errors(definition)
    try_form = TryForm(request.POST)
    result = None
    if not errors and try_form.is_valid():
        result = selectors.policy_try(to_spec(definition), try_form.cleaned_data["sample"])
    return render(request, "policies/partials/try.html",
                  {"errors": errors, "try_form": try_form, "result": result})


@admin_required
@require_POST
def policy_replay(request: HttpRequest, name: str) -> HttpResponse:
    """htmx: what the policy as typed would have denied in the last 7 days."""
    policy = get_object_or_404(Policy, name=name)
    definition = _definition_from_post(request, policy)
    errors = definition_errors(definition)
    report = None if errors else selectors.policy_replay(to_spec(definition), days=7)
    return render(request, "policies/partials/replay.html", {"errors": errors,
                                                             "report": report})


@admin_required
@require_POST
def policy_delete(request: HttpRequest, name: str) -> HttpResponse:
    """Delete a policy with its history (turning it off keeps the history)."""
    policy = get_object_or_404(Policy, name=name)
    services.policy_delete(user=request.user, policy=policy)
    messages.success(request, f"Policy {name} deleted.")
    return redirect("policy-list")


@admin_required
def violation_list(request: HttpRequest) -> HttpResponse:
    """Denials, audit-mode violations, errors and effects, newest first (filterable)."""
    filterset = PolicyViolationFilter(request.GET, queryset=selectors.violation_list())
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    return render(request, "policies/violations.html", {"filter": filterset, "page": page})
