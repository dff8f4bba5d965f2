"""API twins of the approval inbox: what waits for me, approve or deny a held workload."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.pages.access import user_scope
from portal.pages.selectors import workloads_to_decide
from quotas.capacity.api import CapacityRequestOutput, DecisionInput
from quotas.capacity.selectors import capacity_requests_to_decide
from scheduling.request import approvals


class HeldWorkloadOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    queue = serializers.CharField(source="queue.path")
    owner = serializers.CharField(source="owner.username")
    gpus = serializers.IntegerField()
    duration_hint_s = serializers.IntegerField(allow_null=True)
    submitted_at = serializers.DateTimeField()
    state = serializers.CharField()
    needs_approval = serializers.BooleanField()


class InboxOutput(serializers.Serializer):
    capacity_requests = CapacityRequestOutput(many=True)
    workloads = HeldWorkloadOutput(many=True)


class ApprovalInboxApi(APIView):
    @extend_schema(summary="Capacity requests and held workloads you may decide (oldest first)",
                   responses=InboxOutput)
    def get(self, request: Request) -> Response:
        scope = user_scope(request.user)
        return Response(InboxOutput({
            "capacity_requests": list(capacity_requests_to_decide(request.user, scope=scope)[:200]),
            "workloads": list(workloads_to_decide(scope, user=request.user)[:200]),
        }).data)


class _WorkloadDecisionApi(APIView):
    def decide(self, request: Request, workload: Any, comment: str) -> Any:
        raise NotImplementedError

    def post(self, request: Request, pk: int) -> Response:
        workload = workloads_to_decide(user_scope(request.user)).filter(pk=pk).first()
        if workload is None:
            raise Http404("no such workload waiting for your approval")
        data = DecisionInput(data=request.data)
        data.is_valid(raise_exception=True)
        done = self.decide(request, workload, data.validated_data["comment"])
        done.refresh_from_db()
        return Response(HeldWorkloadOutput(done).data)


@extend_schema(summary="Approve a workload held above the thresholds", request=DecisionInput,
               responses=HeldWorkloadOutput)
class WorkloadApproveApi(_WorkloadDecisionApi):
    def decide(self, request: Request, workload: Any, comment: str) -> Any:
        return approvals.workload_approve(user=request.user, workload=workload, comment=comment)


@extend_schema(summary="Deny (reject) a held workload, with a comment", request=DecisionInput,
               responses=HeldWorkloadOutput)
class WorkloadDenyApi(_WorkloadDecisionApi):
    def decide(self, request: Request, workload: Any, comment: str) -> Any:
        return approvals.workload_deny(user=request.user, workload=workload, comment=comment)
