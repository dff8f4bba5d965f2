"""The update path of a workload (scheduling.request.updates): restart an ended one, change a
pending one.

- `POST /api/v1/workloads/{id}/resubmit` (body: optional changed submission fields): 201 with
  the new workload (it may be `rejected`, with its reasons, like any submission).
- `PATCH /api/v1/workloads/{id}` (body: the submission fields to change, not `queue`): 200 with
  the workload; 409 with `reasons` when a policy or the engine refuses the change (the workload
  is left as it was).
- The workload page's "Resubmit" button (POST /workloads/{id}/resubmit/).
- `POST /api/v1/workloads/{id}/extend` (body `{"hours": N}`): a session's time limit extended
  (scheduling/session_time.py): 200 with `time_limit_s`, `ends_at` and the workload; 409 with
  `reasons` when the quota or a policy refuses it. The page's "Extend" button does the same.

Bad input answers 400 naming each field; a workload the caller may not see answers 404, one
they may see but not manage 403.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling import selectors, session_time
from scheduling.api_workloads import (
    WorkloadDetailApi,
    WorkloadDetailSerializer,
    WorkloadInputSerializer,
)
from scheduling.models import Workload
from scheduling.request import updates


def _visible(request: Any, pk: int) -> Workload:
    workload = selectors.workload_get(user=request.user, pk=pk)
    if workload is None:
        raise Http404("no such workload")
    return workload


def _changes(request: Request, allowed: frozenset[str]) -> dict[str, Any]:
    """The changed fields of the body, validated like a submission's (partial: no defaults)."""
    body = request.data if request.data is not None else {}
    if not hasattr(body, "keys"):
        raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
    unknown = sorted(set(body.keys()) - set(WorkloadInputSerializer().fields))
    if unknown:
        raise serializers.ValidationError(
            {name: [f"unknown field (one of: {', '.join(sorted(allowed))})"] for name in unknown})
    data = WorkloadInputSerializer(data=body, partial=True)
    data.is_valid(raise_exception=True)
    return dict(data.validated_data)


def _detail(request: Any, pk: int) -> dict[str, Any]:
    return WorkloadDetailSerializer(  # type: ignore[no-any-return]
        _visible(request, pk), context={"request": request}).data


class WorkloadResubmitApi(APIView):
    """Run an ended workload again as a new workload, optionally with changed fields."""

    @extend_schema(request=WorkloadInputSerializer(partial=True),
                   responses={201: WorkloadDetailSerializer})
    def post(self, request: Request, pk: int) -> Response:
        workload = _visible(request, pk)
        changes = _changes(request, updates.RESUBMIT_FIELDS)
        new = updates.workload_resubmit(user=request.user, workload=workload, changes=changes)
        return Response(_detail(request, new.pk), status=status.HTTP_201_CREATED)


class WorkloadDetailUpdateApi(WorkloadDetailApi):
    """One workload with its reasons, admission, timeline, pods and queue position (GET); a
    pending workload's request changed in place (PATCH)."""

    @extend_schema(
        request=WorkloadInputSerializer(partial=True),
        responses={200: WorkloadDetailSerializer, 409: inline_serializer(
            "WorkloadUpdateRefused", {
                "detail": serializers.CharField(),
                "reasons": serializers.ListField(child=serializers.DictField()),
                "workload": WorkloadDetailSerializer()})})
    def patch(self, request: Request, pk: int) -> Response:
        workload = _visible(request, pk)
        changes = _changes(request, updates.UPDATE_FIELDS)
        outcome = updates.workload_update(user=request.user, workload=workload, changes=changes)
        body = _detail(request, pk)
        if outcome.refused:
            return Response({
                "detail": f"update of {outcome.workload.name} refused: "
                          + "; ".join(m for _, m in outcome.refused),
                "reasons": [{"code": c, "message": m} for c, m in outcome.refused],
                "workload": body,
            }, status=status.HTTP_409_CONFLICT)
        return Response(body)


@login_required
@require_POST
def workload_resubmit_page(request: HttpRequest, pk: int) -> HttpResponse:
    """The workload page's Resubmit button: the same request again, as a new workload."""
    workload = _visible(request, pk)
    try:
        new = updates.workload_resubmit(user=request.user, workload=workload)
    except (ValidationError, PermissionDenied) as exc:
        text = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, f"Resubmit refused: {text}")
        return redirect("workload-detail", pk=pk)
    if new.state == "rejected":
        messages.error(request, f"{new.name} was resubmitted as #{new.pk} and rejected: "
                       f"{new.reason_message}")
    else:
        messages.success(request, f"{new.name} resubmitted as #{new.pk}.")
    return redirect("workload-detail", pk=new.pk)


class WorkloadExtendApi(APIView):
    """Extend an interactive session's time limit by some hours, while the quota allows."""

    @extend_schema(
        request=inline_serializer("SessionExtend", {"hours": serializers.DecimalField(
            max_digits=8, decimal_places=4, help_text="Hours to add (0 < hours <= "
            f"{session_time.MAX_EXTENSION_H}).")}),
        responses={200: inline_serializer("SessionExtended", {
            "time_limit_s": serializers.IntegerField(),
            "ends_at": serializers.DateTimeField(allow_null=True),
            "workload": WorkloadDetailSerializer()}),
            409: inline_serializer("SessionExtendRefused", {
                "detail": serializers.CharField(),
                "reasons": serializers.ListField(child=serializers.DictField()),
                "workload": WorkloadDetailSerializer()})})
    def post(self, request: Request, pk: int) -> Response:
        workload = _visible(request, pk)
        body: dict[str, Any] = dict(request.data) if hasattr(request.data, "keys") else {}
        unknown = sorted(set(body.keys()) - {"hours"})
        if unknown or "hours" not in body:
            raise serializers.ValidationError(
                {**{name: ["unknown field (only: hours)"] for name in unknown},
                 **({} if "hours" in body else {"hours": ["required: the hours to add"]})})
        try:
            done = session_time.session_extend(user=request.user, workload=workload,
                                               hours=body["hours"])
        except ValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        detail = _detail(request, pk)
        if done.refused:
            return Response({
                "detail": f"extension of {workload.name} refused: "
                          + "; ".join(m for _, m in done.refused),
                "reasons": [{"code": c, "message": m} for c, m in done.refused],
                "workload": detail}, status=status.HTTP_409_CONFLICT)
        return Response({"time_limit_s": done.time_limit_s, "ends_at": done.ends_at,
                         "workload": detail})


@login_required
@require_POST
def workload_extend_page(request: HttpRequest, pk: int) -> HttpResponse:
    """The session page's Extend button: the same service as the API."""
    workload = _visible(request, pk)
    try:
        done = session_time.session_extend(user=request.user, workload=workload,
                                           hours=request.POST.get("hours", ""))
    except (ValidationError, PermissionDenied) as exc:
        text = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, f"Extension refused: {text}")
        return redirect("workload-detail", pk=pk)
    if done.refused:
        messages.error(request, "Extension refused: " + "; ".join(m for _, m in done.refused))
    else:
        ends = f", ending at {done.ends_at:%H:%M} UTC" if done.ends_at else ""
        messages.success(request, f"{workload.name}'s time limit is now "
                         f"{session_time.hours_text(done.time_limit_s or 0)}{ends}.")
    return redirect("workload-detail", pk=pk)
