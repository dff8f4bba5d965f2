"""What-if API: `POST /api/v1/what-if` (202: queued), `GET /api/v1/what-if/<id>` (progress,
then the comparison), `GET /api/v1/what-if/<id>/scenario?variant=baseline|changed` (the
scenario file for `manage.py simulate`)."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse, JsonResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.models import WhatIf
from scheduling.whatif.build import WhatIfError
from scheduling.whatif.services import what_if_scenario, what_if_start


class WhatIfInputSerializer(serializers.Serializer):
    hours = serializers.FloatField(default=24, help_text="How far ahead to replay (at most 168).")
    repeat_past = serializers.BooleanField(
        default=True, help_text="Take the last `hours`' submissions as the future's demand.")
    changes = serializers.DictField(help_text=(
        "quotas [{queue, flavor, resource, min, max, lendable}], add_nodes [{cluster, flavor, "
        "count, gpus, cpu, memory_gib}], drain [{cluster, flavor, count}], strategy, "
        "queue_strategies [{queue, strategy}], policies [policy definitions: new, or an "
        "existing one by name with the fields to change; validate, priority or limit]"))


def what_if_data(run: WhatIf) -> dict[str, Any]:
    """A what-if as the API answers it."""
    return {"id": run.pk, "state": run.state, "progress": run.progress, "hours": run.hours,
            "changes": run.changes, "created_at": run.created_at, "seconds": run.seconds,
            "result": run.result, "error": run.error or None,
            "scenario_urls": {v: f"/api/v1/what-if/{run.pk}/scenario?variant={v}"
                              for v in ("baseline", "changed")}}


def what_if_visible(user: Any, pk: int) -> WhatIf:
    """A what-if its owner (or an admin) may read; 404 otherwise."""
    run = WhatIf.objects.filter(pk=pk).first()
    if run is None or not (run.owner_id == user.pk or user.is_staff or user.is_superuser):
        raise Http404("no such what-if")
    return run


class WhatIfCreateApi(APIView):
    """Start a what-if on the live state (admins; leads for their subtree's quotas)."""

    @extend_schema(request=WhatIfInputSerializer, responses={202: dict})
    def post(self, request: Request) -> Response:
        try:
            run = what_if_start(user=request.user, data=request.data)
        except WhatIfError as exc:
            return Response(exc.problems, status=status.HTTP_400_BAD_REQUEST)
        return Response(what_if_data(run), status=status.HTTP_202_ACCEPTED)


class WhatIfDetailApi(APIView):
    """A what-if's state, progress and, once done, both sides' figures."""

    @extend_schema(responses=dict)
    def get(self, request: Request, pk: int) -> Response:
        return Response(what_if_data(what_if_visible(request.user, pk)))


class WhatIfScenarioApi(APIView):
    """One side of a what-if as a scenario file (JSON) for `manage.py simulate`."""

    @extend_schema(parameters=[OpenApiParameter("variant", str, enum=["baseline", "changed"])],
                   responses=dict)
    def get(self, request: Request, pk: int) -> HttpResponse:
        return scenario_file(what_if_visible(request.user, pk),
                             request.query_params.get("variant", "changed"))


def scenario_file(run: WhatIf, variant: str) -> HttpResponse:
    """The download: `what-if-<id>-<variant>.json`."""
    if variant not in ("baseline", "changed"):
        return JsonResponse({"variant": [f"{variant!r}: baseline or changed"]}, status=400)
    resp = JsonResponse(what_if_scenario(run, variant), json_dumps_params={"indent": 1})
    resp["Content-Disposition"] = f'attachment; filename="what-if-{run.pk}-{variant}.json"'
    return resp
