"""`GET /api/v1/history`: recorded changes, newest first, filtered like the history page."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.history import Source
from portal.history import selectors
from portal.history.filters import HistoryFilter
from portal.history.kinds import KIND_CHOICES
from portal.history.selectors import ACTIONS


class FieldChangeOutput(serializers.Serializer):
    field = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]
    before = serializers.JSONField(
        allow_null=True, help_text="As stored (decimals as strings, ids for references); "
        "null when the object was just created or the value was unset.")
    after = serializers.JSONField(allow_null=True)
    before_text = serializers.CharField(help_text='In words and units, e.g. "8 GPUs".')
    after_text = serializers.CharField()


class HistoryEntryOutput(serializers.Serializer):
    type = serializers.ChoiceField(choices=KIND_CHOICES, source="kind",
                                   help_text="The object's type (as the type filter takes it).")
    object = serializers.CharField(help_text="type:id, as the object filter takes it.")
    object_label = serializers.CharField(help_text="e.g. rd/vision a100-80g/gpu")
    url = serializers.CharField(allow_null=True, help_text="The object's portal page.")
    history_id = serializers.IntegerField()
    at = serializers.DateTimeField()
    user = serializers.CharField(allow_null=True, help_text="null: no signed-in user.")
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=Source.choices, help_text="The path it came by.")
    action = serializers.ChoiceField(choices=sorted(set(ACTIONS.values())))
    reason = serializers.CharField(help_text="e.g. capacity request #12 applied")
    changes = FieldChangeOutput(many=True)
    before_known = serializers.BooleanField(
        help_text="false: the object has no earlier record, `changes` holds its state after.")


def _parameters() -> list[OpenApiParameter]:
    """The query parameters, read from the FilterSet the page uses too."""
    out = []
    for name, f in HistoryFilter.base_filters.items():
        choices = [c for c, _ in f.extra.get("choices", [])] or None
        out.append(OpenApiParameter(
            name, OpenApiTypes.STR, many=name == "type", enum=choices,
            description=f"{f.label}. {f.extra.get('help_text', '')}".strip()))
    return out


class HistoryList(generics.ListAPIView):
    """Changes to the quota tree, flavors, clusters, nodes, policies, rate cards and budgets.

    Each entry says who, when, from which path (admin, api, page, import, capacity_request,
    sync, system) and what changed, field by field. Researchers and leads see the changes of
    the queues they may see (and their quotas), their cost centers' budgets, and the fleet;
    policies' changes are for platform admins.
    """

    serializer_class = HistoryEntryOutput
    filter_backends: list[Any] = []  # the FilterSet runs over every history table: below

    @extend_schema(
        parameters=_parameters(),
        responses={200: HistoryEntryOutput(many=True),
                   400: OpenApiResponse(description="A filter is malformed; the body names it, "
                                        'e.g. {"since": ["..."]}.')},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        filterset = HistoryFilter(request.query_params,
                                  parts=selectors.history_querysets(user=request.user),
                                  request=request)
        if not filterset.is_valid():
            raise serializers.ValidationError(filterset.errors)
        page = self.paginate_queryset(filterset.qs)
        entries = selectors.history_entries(list(page if page is not None else filterset.qs))
        data = HistoryEntryOutput(entries, many=True).data
        return self.get_paginated_response(data) if page is not None else Response(data)
