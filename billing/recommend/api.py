"""Recommendations API: `GET /api/v1/recommendations?days=&min_percentile=&max_percentile=`,
`POST /api/v1/recommendations/file` {queue, flavor, resource, days, ...} (201: the capacity
request),
`POST /api/v1/recommendations/replay` {days, ...} (202: the trace replay)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.recommend.services import (
    options_from,
    recommendation_file,
    recommendations,
    recommendations_replay,
    tree_problems,
)
from quotas.capacity.api import CapacityRequestOutput
from scheduling.planner.api import trace_replay_data
from scheduling.planner.traces import TraceError


class RecommendationsApi(APIView):
    """Per queue (every level) and key the user plans for: proposed min and max, with
    evidence, and the tree rules the whole proposal would break (none when consistent)."""

    @extend_schema(responses=dict)
    def get(self, request: Request) -> Response:
        try:
            options = options_from(request.query_params)
        except ValidationError as exc:
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        rows = recommendations(user=request.user, options=options)
        return Response({"days": options.days, "min_percentile": options.min_percentile,
                         "max_percentile": options.max_percentile, "results": rows,
                         "tree_problems": tree_problems(rows)})


class RecommendationFileApi(APIView):
    """File one queue's recommendation as a capacity request."""

    @extend_schema(request=dict, responses={201: CapacityRequestOutput})
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        try:
            req = recommendation_file(user=request.user, queue=str(data.get("queue", "")),
                                      flavor=str(data.get("flavor", "")),
                                      resource=str(data.get("resource") or "gpu"),
                                      options=options_from(data))
        except ValidationError as exc:
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        return Response(CapacityRequestOutput(req).data, status=status.HTTP_201_CREATED)


class RecommendationsReplayApi(APIView):
    """Replay the history under static quotas, the current tree and the recommendations."""

    @extend_schema(request=dict, responses={202: dict})
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        try:
            run = recommendations_replay(user=request.user, options=options_from(data))
        except ValidationError as exc:
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        except TraceError as exc:
            return Response(exc.problems, status=status.HTTP_400_BAD_REQUEST)
        return Response(trace_replay_data(run), status=status.HTTP_202_ACCEPTED)
