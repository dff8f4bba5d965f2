"""REST API of capacity requests (API.md: /api/v1/capacity-requests)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.pages.access import signed_in, user_scope
from quotas.capacity import services
from quotas.capacity.filters import CapacityRequestFilter
from quotas.capacity.models import CapacityRequest, CapacityRequestEvent
from quotas.capacity.selectors import capacity_requests_visible
from quotas.models import Flavor, Queue, Resource


class CapacityRequestInput(serializers.Serializer):
    queue = serializers.CharField(help_text="Queue path, e.g. rd/vision")
    flavor = serializers.CharField(help_text="Flavor (GPU model) name, e.g. a100-80g")
    resource = serializers.ChoiceField(choices=Resource.choices, default=Resource.GPU)
    # Left out: as null (unchanged), so the service names what is missing.
    min = serializers.DecimalField(max_digits=14, decimal_places=3, default=None,
                                   allow_null=True, min_value=0)
    max = serializers.DecimalField(max_digits=14, decimal_places=3, default=None,
                                   allow_null=True, min_value=0)
    justification = serializers.CharField()
    starts_at = serializers.DateTimeField(required=False, allow_null=True)
    ends_at = serializers.DateTimeField(required=False, allow_null=True)

    def validate_queue(self, value: str) -> Queue:
        scope = user_scope(self.context["request"].user)
        queue = Queue.objects.filter(path=value.strip("/")).first()
        if queue is None or not scope.can_see_queue(queue.pk):
            raise serializers.ValidationError(f"no queue {value!r} among your teams' queues")
        return queue

    def validate_flavor(self, value: str) -> Flavor:
        flavor = Flavor.objects.filter(name=value).first()
        if flavor is None:
            names = ", ".join(Flavor.objects.values_list("name", flat=True))
            raise serializers.ValidationError(f"unknown flavor {value!r} (known: {names})")
        return flavor


class DecisionInput(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="")


class CommentInput(serializers.Serializer):
    message = serializers.CharField()


class CapacityEventOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None)

    class Meta:
        model = CapacityRequestEvent
        fields = ["at", "type", "actor", "message", "payload"]


class CapacityRequestOutput(serializers.ModelSerializer):
    queue = serializers.CharField(source="queue.path")
    flavor = serializers.CharField(source="flavor.name")
    min = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    max = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    requested_by = serializers.CharField(source="requested_by.username")
    decided_by = serializers.CharField(source="decided_by.username", default=None)

    class Meta:
        model = CapacityRequest
        fields = ["id", "queue", "flavor", "resource", "min", "max", "justification",
                  "starts_at", "ends_at", "state", "requested_by", "decided_by", "decided_at",
                  "decision_comment", "previous", "created_at"]


class CapacityRequestDetailOutput(CapacityRequestOutput):
    events = CapacityEventOutput(many=True, read_only=True)

    class Meta(CapacityRequestOutput.Meta):
        fields = [*CapacityRequestOutput.Meta.fields, "events"]


@extend_schema_view(
    get=extend_schema(summary="List capacity requests you may see (newest first)",
                      responses=CapacityRequestOutput(many=True)),
    post=extend_schema(summary="File a capacity request", request=CapacityRequestInput,
                       responses={201: CapacityRequestDetailOutput}),
)
class CapacityRequestListApi(generics.ListAPIView):
    serializer_class = CapacityRequestOutput
    filterset_class = CapacityRequestFilter

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return capacity_requests_visible(self.request.user).order_by("-created_at", "-id")

    def post(self, request: Request) -> Response:
        data = CapacityRequestInput(data=request.data, context={"request": request})
        data.is_valid(raise_exception=True)
        created = services.capacity_request_submit(user=signed_in(request.user),
                                                   **data.validated_data)
        return Response(CapacityRequestDetailOutput(created).data,
                        status=status.HTTP_201_CREATED)


def _visible(request: Request, pk: int) -> CapacityRequest:
    return get_object_or_404(
        capacity_requests_visible(request.user).prefetch_related("events__actor"), pk=pk
    )


class CapacityRequestDetailApi(APIView):
    @extend_schema(summary="One capacity request with its events",
                   responses=CapacityRequestDetailOutput)
    def get(self, request: Request, pk: int) -> Response:
        return Response(CapacityRequestDetailOutput(_visible(request, pk)).data)


class _ActionApi(APIView):
    input_class: type[serializers.Serializer] = DecisionInput

    def act(self, request: Request, obj: CapacityRequest, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: Request, pk: int) -> Response:
        obj = _visible(request, pk)
        data = self.input_class(data=request.data)
        data.is_valid(raise_exception=True)
        self.act(request, obj, data.validated_data)
        return Response(CapacityRequestDetailOutput(_visible(request, pk)).data)


@extend_schema(summary="Approve (applied at once when its period has started)",
               request=DecisionInput, responses=CapacityRequestDetailOutput)
class CapacityRequestApproveApi(_ActionApi):
    def act(self, request: Request, obj: CapacityRequest, data: dict[str, Any]) -> None:
        services.capacity_request_approve(user=signed_in(request.user), request=obj,
                                          comment=data["comment"])


@extend_schema(summary="Deny with a comment", request=DecisionInput,
               responses=CapacityRequestDetailOutput)
class CapacityRequestDenyApi(_ActionApi):
    def act(self, request: Request, obj: CapacityRequest, data: dict[str, Any]) -> None:
        services.capacity_request_deny(user=signed_in(request.user), request=obj,
                                       comment=data["comment"])


@extend_schema(summary="Withdraw a request that has not taken effect", request=None,
               responses=CapacityRequestDetailOutput)
class CapacityRequestCancelApi(_ActionApi):
    def act(self, request: Request, obj: CapacityRequest, data: dict[str, Any]) -> None:
        services.capacity_request_cancel(user=signed_in(request.user), request=obj)


@extend_schema(summary="Comment on a request", request=CommentInput,
               responses=CapacityRequestDetailOutput)
class CapacityRequestCommentApi(_ActionApi):
    input_class = CommentInput

    def act(self, request: Request, obj: CapacityRequest, data: dict[str, Any]) -> None:
        services.capacity_request_comment(user=signed_in(request.user), request=obj,
                                          message=data["message"])
