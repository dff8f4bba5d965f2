"""Billing API: usage, invoices (with CSV/JSON downloads), budgets, rates.

Researchers see their teams' costs only; invoices are for admins and the leads of the cost
center's teams; anything outside a caller's scope is a 404.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors
from billing.forms import day_start, parse_day, parse_month
from billing.models import BudgetAction, BudgetPeriod, CostCenter, Invoice, RateCard
from billing.services import budget_create, invoice_issue, rate_card_create
from billing.services.budgets import MAX_PERCENT, period_bounds
from billing.services.invoices import invoice_as_csv, invoice_as_dict
from quotas.models import Flavor

MONEY: dict[str, Any] = {"max_digits": 16, "decimal_places": 2}
QTY: dict[str, Any] = {"max_digits": 18, "decimal_places": 4}


def _require_admin(request) -> None:
    if not selectors.is_admin(request.user):
        raise PermissionDenied("platform admins only")


# ---- usage -----------------------------------------------------------------------------------

class UsageQuery(serializers.Serializer):
    group_by = serializers.ChoiceField(choices=["team", "queue", "flavor"], default="team")
    start = serializers.DateTimeField(required=False, source="from")
    to = serializers.DateTimeField(required=False)

    def to_internal_value(self, data):
        data = {**data.dict()} if hasattr(data, "dict") else dict(data)
        if "from" in data:
            data["start"] = data.pop("from")
        errors: dict[str, Any] = {}
        for key, name in (("start", "from"), ("to", "to")):
            value = data.get(key)
            if isinstance(value, str) and len(value) == 10:
                try:  # a bare date: its UTC midnight
                    data[key] = day_start(parse_day(value, name)).isoformat()
                except DjangoValidationError as exc:
                    errors.update(exc.message_dict)
                    del data[key]
        try:
            internal = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {}
            for key, messages in detail.items():
                if key in ("start", "to"):  # the parameter's name, and the value given
                    errors["from" if key == "start" else key] = [
                        f"{data[key]!r}: {m}" for m in messages]
                else:
                    errors[key] = messages
        if errors:
            raise serializers.ValidationError(errors)
        return internal


class UsageRow(serializers.Serializer):
    key = serializers.CharField()
    reserved_gpu_hours = serializers.DecimalField(**QTY)
    frozen_gpu_hours = serializers.DecimalField(**QTY)
    active_gpu_hours = serializers.DecimalField(**QTY)
    gap_gpu_hours = serializers.DecimalField(**QTY)
    core_hours = serializers.DecimalField(**QTY)
    efficiency = serializers.DecimalField(max_digits=10, decimal_places=4, allow_null=True)
    cost = serializers.DecimalField(
        **MONEY, help_text="billed + provisional: the dashboard's and the budgets' figure")
    billed = serializers.DecimalField(**MONEY, help_text="priced by the hourly rollup")
    provisional = serializers.DecimalField(
        **MONEY, help_text="metered from admissions, not rolled up yet (replaced by billed "
                           "hours once the rollup runs)")
    currency = serializers.CharField()


class UsageView(APIView):
    """Usage and cost grouped by team, queue or flavor over [from, to) (default: this month)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("group_by", str, enum=["team", "queue", "flavor"]),
            OpenApiParameter("from", OpenApiTypes.DATETIME, description="inclusive (UTC)"),
            OpenApiParameter("to", OpenApiTypes.DATETIME, description="exclusive (UTC)"),
        ],
        responses=inline_serializer("UsageResponse", {
            "group_by": serializers.CharField(), "from": serializers.DateTimeField(),
            "to": serializers.DateTimeField(), "rows": UsageRow(many=True),
        }),
    )
    def get(self, request):
        query = UsageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        now = timezone.now()
        month_start, _ = period_bounds("monthly", now)
        start = query.validated_data.get("from") or month_start
        end = query.validated_data.get("to") or now
        if end <= start:
            raise serializers.ValidationError(
                {"to": [f"must be after from ({start.isoformat()}), got {end.isoformat()}"]})
        group_by = query.validated_data["group_by"]
        rows = selectors.usage_summary(user=request.user, group_by=group_by, start=start,
                                       end=end)
        out = [UsageRow({"key": r[group_by], **r}).data for r in rows]
        return Response({"group_by": group_by, "from": start, "to": end, "rows": out})


# ---- invoices --------------------------------------------------------------------------------

class InvoiceOut(serializers.ModelSerializer):
    cost_center = serializers.CharField(source="cost_center.code")

    class Meta:
        model = Invoice
        fields = ["id", "number", "cost_center", "period_start", "period_end", "state",
                  "currency", "total", "ledger_seq_max", "entry_count", "issued_at"]


class InvoiceIssueIn(serializers.Serializer):
    cost_center = serializers.SlugRelatedField(slug_field="code",
                                               queryset=CostCenter.objects.all())
    month = serializers.CharField(help_text="YYYY-MM: a finished month", max_length=7)

    def validate_month(self, value: str) -> date:
        try:
            return parse_month(value)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict["month"]) from exc


class InvoiceListView(APIView):
    """Invoices the caller may see; admins issue a finished month's invoice with POST."""

    @extend_schema(responses=InvoiceOut(many=True))
    def get(self, request):
        qs = selectors.visible_invoices(request.user).order_by("-period_start", "pk")
        return Response(InvoiceOut(qs, many=True).data)

    @extend_schema(request=InvoiceIssueIn, responses={201: InvoiceOut})
    def post(self, request):
        _require_admin(request)
        data = InvoiceIssueIn(data=request.data)
        data.is_valid(raise_exception=True)
        invoice = invoice_issue(cost_center=data.validated_data["cost_center"],
                                month=data.validated_data["month"], user=request.user)
        return Response(InvoiceOut(invoice).data, status=status.HTTP_201_CREATED)


class InvoiceDetailView(APIView):
    """One invoice with its lines and per-workload appendix.

    `?download=csv` gives the CSV file, `?download=json` the JSON as an attachment.
    """

    @extend_schema(
        parameters=[OpenApiParameter("download", str, enum=["json", "csv"])],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request, pk: int):
        invoice = get_object_or_404(selectors.visible_invoices(request.user), pk=pk)
        download = request.query_params.get("download")
        if download == "csv":
            response = HttpResponse(invoice_as_csv(invoice), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{invoice.number}.csv"'
            return response
        response = Response(invoice_as_dict(invoice))
        if download == "json":
            response["Content-Disposition"] = f'attachment; filename="{invoice.number}.json"'
        return response


# ---- budgets ---------------------------------------------------------------------------------

class ThresholdIO(serializers.Serializer):
    percent = serializers.IntegerField(min_value=1, max_value=MAX_PERCENT)
    action = serializers.ChoiceField(choices=BudgetAction.choices)
    fired = serializers.BooleanField(read_only=True)


class BudgetOut(serializers.Serializer):
    id = serializers.IntegerField()
    cost_center = serializers.CharField()
    period = serializers.CharField()
    amount = serializers.DecimalField(**MONEY)
    currency = serializers.CharField()
    spent = serializers.DecimalField(
        **MONEY, help_text="billed + provisional: the figure thresholds compare")
    billed = serializers.DecimalField(**MONEY, help_text="priced by the hourly rollup")
    provisional = serializers.DecimalField(
        **MONEY, help_text="metered from admissions since the last rollup, at today's rates")
    as_of = serializers.DateTimeField()
    percent = serializers.DecimalField(max_digits=8, decimal_places=1)
    forecast = serializers.DecimalField(**MONEY)
    committed = serializers.DecimalField(**MONEY)
    run_rate_per_hour = serializers.DecimalField(**MONEY)
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    thresholds = ThresholdIO(many=True)


class BudgetIn(serializers.Serializer):
    cost_center = serializers.SlugRelatedField(slug_field="code",
                                               queryset=CostCenter.objects.all())
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, default="monthly")
    amount = serializers.DecimalField(max_digits=16, decimal_places=2, min_value=Decimal("0.01"))
    thresholds = ThresholdIO(many=True, required=False)


class BudgetListView(APIView):
    """Budgets of the caller's cost centers with spend, forecast and thresholds fired."""

    @extend_schema(responses=BudgetOut(many=True))
    def get(self, request):
        now = timezone.now()
        rows = [selectors.budget_status(b, now) for b in selectors.visible_budgets(request.user)]
        return Response(BudgetOut(rows, many=True).data)

    @extend_schema(request=BudgetIn, responses={201: BudgetOut})
    def post(self, request):
        _require_admin(request)
        data = BudgetIn(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        thresholds = [(t["percent"], t["action"]) for t in v.get("thresholds", [])] or None
        budget = budget_create(cost_center=v["cost_center"], amount=v["amount"],
                               period=v["period"], thresholds=thresholds)
        return Response(BudgetOut(selectors.budget_status(budget)).data,
                        status=status.HTTP_201_CREATED)


# ---- rates -----------------------------------------------------------------------------------

class RateOut(serializers.ModelSerializer):
    flavor = serializers.CharField(source="flavor.name")
    frozen_rate = serializers.DecimalField(max_digits=12, decimal_places=4,
                                           source="effective_frozen_rate")

    class Meta:
        model = RateCard
        fields = ["id", "flavor", "resource", "version", "effective_from", "rate",
                  "frozen_rate", "unit", "currency", "note", "created_at"]


class RateIn(serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())
    resource = serializers.CharField(
        max_length=253, help_text="gpu, cpu, memory, gpu-fraction (fractions of a card, per "
        "GPU-hour) or a MIG profile with a GPU-equivalent on the flavor, e.g. "
        "nvidia.com/mig-1g.10gb (per slice-hour); checked against the flavor")
    # The sign is checked with the resource's unit by rate_card_create.
    rate = serializers.DecimalField(max_digits=12, decimal_places=4)
    frozen_rate = serializers.DecimalField(max_digits=12, decimal_places=4,
                                           required=False, allow_null=True)
    currency = serializers.CharField(max_length=3, default="EUR")
    effective_from = serializers.DateTimeField()
    note = serializers.CharField(max_length=200, required=False, default="")


class RateListView(APIView):
    """Rate card versions (everyone); admins add a new version with POST."""

    @extend_schema(responses=RateOut(many=True))
    def get(self, request):
        return Response(RateOut(selectors.rate_cards(), many=True).data)

    @extend_schema(request=RateIn, responses={201: RateOut})
    def post(self, request):
        _require_admin(request)
        data = RateIn(data=request.data)
        data.is_valid(raise_exception=True)
        card = rate_card_create(**data.validated_data, user=request.user)
        return Response(RateOut(card).data, status=status.HTTP_201_CREATED)


class WorkloadCostOut(serializers.Serializer):
    workload = serializers.IntegerField()
    so_far = serializers.DecimalField(**MONEY)
    billed = serializers.DecimalField(**MONEY)
    unbilled = serializers.DecimalField(**MONEY)
    provisional = serializers.BooleanField(
        help_text="true while `unbilled` holds time the hourly rollup has not billed yet")
    as_of = serializers.DateTimeField()
    estimate_total = serializers.DecimalField(**MONEY)
    currency = serializers.CharField()
    reserved_gpu_hours = serializers.DecimalField(**QTY)
    frozen_gpu_hours = serializers.DecimalField(**QTY)
    active_gpu_hours = serializers.DecimalField(**QTY, allow_null=True)
    efficiency = serializers.DecimalField(max_digits=10, decimal_places=4, allow_null=True)


class WorkloadCostView(APIView):
    """A workload's cost so far, its estimated total, and why (GPU-hours, frozen, efficiency)."""

    @extend_schema(responses=WorkloadCostOut)
    def get(self, request, pk: int):
        workload = selectors.visible_workload(request.user, pk)
        if workload is None:
            raise Http404("not found")
        cost = selectors.workload_cost(workload)
        return Response(WorkloadCostOut({"workload": workload.pk, **cost}).data)
