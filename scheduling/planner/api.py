"""Trace replay API: `POST /api/v1/trace-replays` (multipart: `file`, optional `flavor`,
`changes` as JSON, `tree` a file; or JSON with `name` and `content`; 202: queued, the file
read in the background), `GET /api/v1/trace-replays/<id>` (progress, then the three sides, or
the upload's problems by line),
`GET /api/v1/trace-replays/<id>/scenario?variant=static|current|proposed`."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse, JsonResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.models import TraceReplay
from scheduling.planner.services import trace_replay_start
from scheduling.planner.traces import TraceError
from scheduling.planner.variants import VARIANTS


class TraceReplayInputSerializer(serializers.Serializer):
    file = serializers.FileField(required=False, help_text=(
        "A Philly-style CSV, an Alibaba-style CSV or a scenario file (.json, .yaml)."))
    name = serializers.CharField(required=False, help_text="With `content`: the file's name.")
    content = serializers.CharField(required=False, help_text="The trace as text (JSON body).")
    flavor = serializers.CharField(required=False, help_text="The GPU model a CSV's jobs ask.")
    changes = serializers.JSONField(required=False, help_text=(
        "The proposal: {quotas: [{queue, flavor, resource, min, max, lendable}]}"))
    tree = serializers.FileField(required=False, help_text="A proposed tree (queues list).")


def trace_replay_data(run: TraceReplay) -> dict[str, Any]:
    """A trace replay as the API answers it."""
    return {"id": run.pk, "name": run.name, "kind": run.kind, "workloads": run.workloads,
            "notes": run.notes, "state": run.state, "progress": run.progress,
            "changes": run.changes, "created_at": run.created_at, "seconds": run.seconds,
            "tenants": run.scenarios.get("current", {}).get("x-tenants"),
            "result": run.result, "error": run.error or None, "problems": run.problems,
            "scenario_urls": {v: f"/api/v1/trace-replays/{run.pk}/scenario?variant={v}"
                              for v in VARIANTS}}


def trace_replay_visible(user: Any, pk: int) -> TraceReplay:
    """A replay its owner (or an admin) may read; 404 otherwise."""
    run = TraceReplay.objects.filter(pk=pk).defer("upload").first()
    if run is None or not (run.owner_id == user.pk or user.is_staff or user.is_superuser):
        raise Http404("no such trace replay")
    return run


class TraceReplayCreateApi(APIView):
    """Upload a trace and replay it under static quotas, the current tree and a proposal."""

    parser_classes = [MultiPartParser, FormParser, JSONParser]

    @extend_schema(request=TraceReplayInputSerializer, responses={202: dict})
    def post(self, request: Request) -> Response:
        upload = request.FILES.get("file")
        tree = request.FILES.get("tree")
        body: Any = request.data
        if not hasattr(body, "get"):  # JSON that is not an object: a list, a number, null
            return Response({"non_field_errors": [
                f"expected a JSON object (`name` and `content`), got {type(body).__name__}"]},
                status=status.HTTP_400_BAD_REQUEST)
        if upload is not None:
            name, size, read = upload.name or "trace.csv", upload.size or 0, upload.read
        elif isinstance(body.get("content"), str):
            name = str(body.get("name") or "trace.csv")
            data = body["content"].encode()
            size, read = len(data), lambda: data
        else:
            return Response({"file": ["upload a trace as `file` (or `name` and `content`)"]},
                            status=status.HTTP_400_BAD_REQUEST)
        try:
            run = trace_replay_start(
                user=request.user, name=name, size=size, read=read,
                flavor=body.get("flavor") or None, changes=body.get("changes"),
                tree_name=(tree.name or "") if tree is not None else "",
                tree_data=tree.read() if tree is not None else None)
        except TraceError as exc:
            return Response(exc.problems, status=status.HTTP_400_BAD_REQUEST)
        return Response(trace_replay_data(run), status=status.HTTP_202_ACCEPTED)


class TraceReplayDetailApi(APIView):
    """A trace replay's state, progress and, once done, the three sides' figures."""

    @extend_schema(responses=dict)
    def get(self, request: Request, pk: int) -> Response:
        return Response(trace_replay_data(trace_replay_visible(request.user, pk)))


class TraceReplayScenarioApi(APIView):
    """One side of a trace replay as a scenario file (JSON) for `manage.py simulate`."""

    @extend_schema(parameters=[OpenApiParameter("variant", str, enum=list(VARIANTS))],
                   responses=dict)
    def get(self, request: Request, pk: int) -> HttpResponse:
        return scenario_file(trace_replay_visible(request.user, pk),
                             request.query_params.get("variant", "proposed"))


def scenario_file(run: TraceReplay, variant: str) -> HttpResponse:
    """The download: `trace-replay-<id>-<variant>.json`."""
    if variant not in VARIANTS:
        return JsonResponse({"variant": [f"{variant!r}: one of {', '.join(VARIANTS)}"]},
                            status=400)
    resp = JsonResponse(run.scenarios[variant], json_dumps_params={"indent": 1})
    resp["Content-Disposition"] = (f'attachment; filename="trace-replay-{run.pk}-{variant}'
                                   '.json"')
    return resp
