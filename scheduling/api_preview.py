"""POST /api/v1/workloads/preview: what the request form shows before submitting, for the API
and the CLI: can the request ever fit, on which GPU model, what it would cost per hour (and
over its duration hint) and when it would start. Nothing is saved."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.api_workloads import WorkloadInputSerializer
from scheduling.request.lookups import SubmitLookups
from scheduling.request.manifests import gang_manifests
from scheduling.request.preview import workload_preview
from scheduling.request.validation import _validate, gpus_shown

CENTS = Decimal("0.01")


class VerdictSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    possible = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.DictField(),
                                    help_text="[{code, message}] when it can never fit.")


class PreviewSerializer(serializers.Serializer):
    gpus = serializers.CharField(help_text="GPUs asked in all (fractions as they are).")
    flavors = VerdictSerializer(many=True)
    flavor = serializers.CharField(allow_null=True,
                                   help_text="The first GPU model it can ever fit.")
    cost_per_hour = serializers.CharField(
        allow_null=True, help_text="Once it runs, at the rates in force: fractions as they "
        "are, MIG slices as their GPU-equivalents (null: no rate for the model).")
    cost_total = serializers.CharField(allow_null=True,
                                       help_text="Over the duration hint, when given.")
    currency = serializers.CharField(allow_null=True)
    gpus_billed = serializers.CharField(allow_null=True,
                                        help_text="Cards billed: GPUs plus MIG slices.")
    estimated_start = serializers.DateTimeField(allow_null=True)


class WorkloadPreviewApi(APIView):
    """A submission's preview (the same body as POST /workloads): 200 with the verdicts, the
    cost estimate and the forecast; 400 naming each bad field; nothing is saved."""

    @extend_schema(request=WorkloadInputSerializer, responses=PreviewSerializer)
    def post(self, request: Request) -> Response:
        payload: Any = request.data  # not a JSON object: a 400 from the validation
        clean = _validate(request.user, payload, SubmitLookups(request.user))
        # A kind whose groups are workloads of their own (a LeaderWorkerSet): one group's.
        _, pods = gang_manifests(clean["kind"], clean["manifest"], list(clean["pods"]))[0]
        submission: dict[str, Any] = {
            **clean, "priority_class": clean["priority_class"].name, "pods": list(pods),
        }
        preview = workload_preview(queue=clean["queue"], submission=submission,
                                   now=timezone.now())
        cost = preview.cost
        return Response({
            "gpus": str(gpus_shown(preview.gpus)),
            "flavors": [{"flavor": v.flavor, "possible": v.possible,
                         "reasons": [{"code": c, "message": m} for c, m in v.reasons]}
                        for v in preview.flavors],
            "flavor": preview.flavor,
            "cost_per_hour": None if cost is None else str(cost.per_hour.quantize(
                CENTS)),
            "cost_total": None if preview.cost_total is None else str(preview.cost_total),
            "currency": None if cost is None else cost.currency,
            "gpus_billed": None if cost is None else str(gpus_shown(cost.cards)),
            "estimated_start": preview.estimated_start,
        })

