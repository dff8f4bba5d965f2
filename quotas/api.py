"""API for the quota tree: flavors and queues (members read, platform admins write)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.quantity import QuantityError, read_amount
from portal.pages.access import user_scope
from portal.permissions import IsAdminOrReadOnly
from quotas import selectors, services
from quotas.models import MAX_GPU_EQUIVALENT, Flavor, Queue, Strategy
from quotas.tree_rules import QuotaSpec

# --- flavors -----------------------------------------------------------------------------


class FlavorOutput(serializers.ModelSerializer):
    class Meta:
        model = Flavor
        fields = ["name", "node_selector", "gpu_memory_gib", "interconnect_label",
                  "mig_profiles", "gpu_equivalents", "notes"]


class FlavorInput(serializers.Serializer):
    name = serializers.CharField(max_length=63)
    node_selector = serializers.DictField(child=serializers.CharField(), required=False)
    gpu_memory_gib = serializers.IntegerField(min_value=1, allow_null=True, required=False)
    interconnect_label = serializers.CharField(max_length=253, allow_blank=True, required=False)
    mig_profiles = serializers.ListField(child=serializers.CharField(), required=False)
    gpu_equivalents = serializers.DictField(
        child=serializers.FloatField(min_value=0, max_value=MAX_GPU_EQUIVALENT), required=False,
        help_text="Cards one unit of an extended resource is worth, e.g. "
        '{"nvidia.com/mig-3g.40gb": 0.5}; a MIG slice mig-Ng.* not listed is worth N/7.')
    notes = serializers.CharField(allow_blank=True, required=False)


class FlavorList(APIView):
    """The flavors (classes of node); admins register new ones."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=FlavorOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(FlavorOutput(Flavor.objects.order_by("name"), many=True).data)

    @extend_schema(request=FlavorInput, responses={201: FlavorOutput})
    def post(self, request: Request) -> Response:
        data = FlavorInput(data=request.data)
        data.is_valid(raise_exception=True)
        flavor = services.flavor_create(**data.validated_data)
        return Response(FlavorOutput(flavor).data, status=status.HTTP_201_CREATED)


class FlavorDetail(APIView):
    """One flavor; admins change its labels and facts."""

    permission_classes = [IsAdminOrReadOnly]

    def get_object(self, name: str) -> Flavor:
        try:
            return Flavor.objects.get(name=name)
        except Flavor.DoesNotExist as exc:
            raise Http404(f"No flavor named {name!r}.") from exc

    @extend_schema(responses=FlavorOutput)
    def get(self, request: Request, name: str) -> Response:
        return Response(FlavorOutput(self.get_object(name)).data)

    @extend_schema(request=FlavorInput(partial=True), responses=FlavorOutput)
    def patch(self, request: Request, name: str) -> Response:
        flavor = self.get_object(name)
        data = FlavorInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        if fields.pop("name", name) != name:
            raise ValidationError("a flavor's name cannot change (quotas and nodes refer to it)")
        flavor = services.flavor_update(flavor=flavor, **fields)
        return Response(FlavorOutput(flavor).data)


# --- queues ------------------------------------------------------------------------------


class QuotaCellOutput(serializers.Serializer):
    min = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    max = serializers.DecimalField(
        max_digits=14, decimal_places=3, coerce_to_string=False, allow_null=True,
        help_text="null: unlimited (whatever the fleet has).",
    )
    lendable = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    set = serializers.BooleanField(help_text="The queue sets this key itself (else defaults).")
    used = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    borrowed = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    lent = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    pending = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
    unit = serializers.CharField(help_text="GiB, cores, GPUs, or empty for a count.")
    quantities = serializers.DictField(
        child=serializers.CharField(allow_null=True),
        help_text="min, max and lendable exactly, as Kubernetes quantities (4G, 500m).")


class QueueOutput(serializers.Serializer):
    path = serializers.CharField()
    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)  # type: ignore[assignment]
    depth = serializers.IntegerField()
    strategy = serializers.CharField()
    namespace = serializers.CharField()
    description = serializers.CharField()
    is_leaf = serializers.BooleanField()
    can_submit = serializers.BooleanField(help_text="A leaf one of your teams may submit to.")
    quota = serializers.DictField(
        child=serializers.DictField(child=QuotaCellOutput()),
        help_text="FLAVOR -> RESOURCE -> {min, max, lendable, used, borrowed, lent, pending}",
    )

    def get_fields(self) -> dict[str, serializers.Field]:
        # The tree nests: each queue lists its children as queues (built when used, as a
        # class cannot name itself in its own body).
        fields = super().get_fields()
        fields["children"] = QueueOutput(many=True)
        return fields

_CELL_FIELD = serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)
_CELL_DECIMALS = ("min", "max", "lendable")
_CELL_USAGE = ("used", "borrowed", "lent", "pending")
# Distinct quota/usage values seen (equal Decimals quantize alike); bounded in practice by
# the few distinct quota and usage numbers of one tree, and cleared when it grows large.
_numbers: dict[Any, float] = {}


def _cell_number(value: Any) -> float | None:
    # As QuotaCellOutput's DecimalField(max_digits=14, decimal_places=3) quantizes it, then as
    # DRF's JSON encoder writes a Decimal (a float): done here, once per distinct value.
    if value is None:
        return None
    out = _numbers.get(value)
    if out is None:
        out = _numbers[value] = float(_CELL_FIELD.quantize(Decimal(value)))
    return out


def queue_output_data(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`QueueOutput(nodes, many=True).data` built directly: the same fields, order and values.

    The whole tree holds thousands of quota cells; DRF's per-field machinery cost more than
    computing the tree. `QueueOutput` stays the documented schema; a test pins the equality.
    """
    if len(_numbers) > 10_000:
        _numbers.clear()
    out = []
    for n in nodes:
        quota = {
            str(flavor): {
                str(resource): {
                    **{f: _cell_number(cell[f]) for f in _CELL_DECIMALS},
                    "set": bool(cell["set"]),
                    **{f: _cell_number(cell[f]) for f in _CELL_USAGE},
                    "unit": str(cell["unit"]),
                    "quantities": {f: None if v is None else str(v)
                                   for f, v in cell["quantities"].items()},
                }
                for resource, cell in resources.items()
            }
            for flavor, resources in n["quota"].items()
        }
        out.append({
            "path": str(n["path"]), "name": str(n["name"]),
            "parent": None if n["parent"] is None else str(n["parent"]),
            "depth": int(n["depth"]), "strategy": str(n["strategy"]),
            "namespace": str(n["namespace"]), "description": str(n["description"]),
            "is_leaf": bool(n["is_leaf"]), "can_submit": bool(n["can_submit"]),
            "quota": quota, "children": queue_output_data(n["children"]),
        })
    return out


class QueueChangeOutput(QueueOutput):
    warnings = serializers.ListField(
        child=serializers.CharField(), help_text="Tree warnings (W1-W3): saved, but look."
    )


class DeleteOutput(serializers.Serializer):
    deleted = serializers.CharField()
    warnings = serializers.ListField(child=serializers.CharField())


@extend_schema_field({"oneOf": [{"type": "number"}, {"type": "string"}],
                      "example": "4G"})
class QuantityField(serializers.Field):
    """A number in Allot's unit (GiB, cores, cards, a count) or a Kubernetes quantity string
    (`"4G"`, `"500m"`, `"2048Gi"`); read exactly for its resource by `_quota`."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            raise serializers.ValidationError(
                f"{data!r} is not a number or a Kubernetes quantity (like 64, 500m, 2048Gi)")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class QuotaCellInput(serializers.Serializer):
    min = QuantityField(required=False, default=0)
    max = QuantityField(required=False, allow_null=True, default=None)
    lendable = QuantityField(required=False, allow_null=True, default=None)


STRATEGIES = ["", *Strategy.values]


class QueueCreateInput(serializers.Serializer):
    parent = serializers.CharField(  # type: ignore[assignment]
        allow_null=True, required=False, default=None, help_text="Parent path; null: top level."
    )
    name = serializers.CharField(max_length=63)
    strategy = serializers.ChoiceField(choices=STRATEGIES, required=False, default="")
    namespace = serializers.CharField(max_length=63, allow_blank=True, required=False, default="")
    description = serializers.CharField(allow_blank=True, required=False, default="")
    quota = serializers.DictField(
        child=serializers.DictField(child=QuotaCellInput()), required=False, default=dict,
        help_text="FLAVOR -> RESOURCE -> {min, max, lendable}; max/lendable null = default.",
    )


class QueueUpdateInput(serializers.Serializer):
    parent = serializers.CharField(  # type: ignore[assignment]
        allow_null=True, required=False, help_text="Move the queue."
    )
    name = serializers.CharField(max_length=63, required=False)
    strategy = serializers.ChoiceField(choices=STRATEGIES, required=False)
    namespace = serializers.CharField(max_length=63, allow_blank=True, required=False)
    description = serializers.CharField(allow_blank=True, required=False)
    quota = serializers.DictField(
        child=serializers.DictField(child=QuotaCellInput(allow_null=True)), required=False,
        help_text="Keys given are set (a null value clears the key); keys not given stay.",
    )


def _quota(data: dict[str, dict[str, Any]]) -> dict[tuple[str, str], QuotaSpec | None]:
    """The cells as exact amounts; a bad quantity is a 400 naming the cell."""
    out: dict[tuple[str, str], QuotaSpec | None] = {}
    errors: dict[str, list[str]] = {}
    for flavor, cells in data.items():
        for resource, cell in cells.items():
            if cell is None:
                out[(flavor, resource)] = None
                continue
            numbers: dict[str, Decimal | None] = {}
            for name in ("min", "max", "lendable"):
                where = f"quota.{flavor}.{resource}.{name}"
                value = cell.get(name)
                try:
                    numbers[name] = None if value is None else read_amount(resource, value)
                except QuantityError as exc:
                    errors.setdefault(where, []).append(str(exc))
            out[(flavor, resource)] = QuotaSpec(
                min=numbers.get("min") or 0, max=numbers.get("max"),
                lendable=numbers.get("lendable"))
    if errors:
        raise serializers.ValidationError(errors)
    return out


def _queue_or_404(path: str) -> Queue:
    try:
        return Queue.objects.select_related("parent").get(path=path.strip("/"))
    except Queue.DoesNotExist as exc:
        raise Http404(f"No queue at path {path!r}.") from exc


def _parent_or_400(path: str | None) -> Queue | None:
    if path in (None, ""):
        return None
    try:
        return Queue.objects.get(path=path.strip("/"))
    except Queue.DoesNotExist as exc:
        raise serializers.ValidationError({"parent": [f"No queue at path {path!r}."]}) from exc


def _node(request: Request, path: str, warnings: list[str]) -> dict[str, Any]:
    node = selectors.queue_tree(user=request.user, root=path)[0]
    return QueueChangeOutput({**node, "warnings": warnings}).data


class QueueList(APIView):
    """The queue tree, nested, with quota and usage per flavor and resource.

    Researchers and leads get the part of the tree around their teams' queues only.
    """

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=QueueOutput(many=True))
    def get(self, request: Request) -> Response:
        nodes = selectors.queue_tree(user=request.user)
        return Response(queue_output_data(selectors.visible_nodes(nodes, user_scope(request.user))))

    @extend_schema(
        request=QueueCreateInput,
        responses={201: QueueChangeOutput,
                   400: OpenApiResponse(description="A tree rule is broken; nothing saved.")},
    )
    def post(self, request: Request) -> Response:
        data = QueueCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        quota = {k: s for k, s in _quota(v["quota"]).items() if s is not None}
        change = services.queue_create(
            name=v["name"], parent=_parent_or_400(v["parent"]), quota=quota,
            strategy=v["strategy"], namespace=v["namespace"], description=v["description"],
        )
        assert change.queue is not None
        return Response(
            _node(request, change.queue.path, change.warnings), status=status.HTTP_201_CREATED
        )


class QueueDetail(APIView):
    """One queue and its subtree; admins change or delete it."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=QueueOutput)
    def get(self, request: Request, path: str) -> Response:
        nodes = selectors.queue_tree(user=request.user, root=path.strip("/"))
        scope = user_scope(request.user)
        # Other teams' queues are answered like unknown ones (API.md: 404, never 403).
        if not nodes or not scope.can_see_queue(nodes[0]["id"]):
            raise Http404(f"No queue at path {path!r}.")
        nodes = [{**nodes[0], "children": selectors.visible_nodes(nodes[0]["children"], scope)}]
        return Response(queue_output_data(nodes[:1])[0])

    @extend_schema(
        request=QueueUpdateInput,
        responses={200: QueueChangeOutput,
                   400: OpenApiResponse(description="A tree rule is broken; nothing saved.")},
    )
    def patch(self, request: Request, path: str) -> Response:
        queue = _queue_or_404(path)
        data = QueueUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        kwargs: dict[str, Any] = {}
        if "parent" in v:
            kwargs["parent"] = _parent_or_400(v.pop("parent"))
        if "quota" in v:
            kwargs["quota_merge"] = _quota(v.pop("quota"))
        kwargs.update(v)
        change = services.queue_update(queue=queue, **kwargs)
        assert change.queue is not None
        return Response(_node(request, change.queue.path, change.warnings))

    @extend_schema(responses={200: DeleteOutput})
    def delete(self, request: Request, path: str) -> Response:
        queue = _queue_or_404(path)
        deleted = queue.path
        change = services.queue_delete(queue=queue)
        return Response(DeleteOutput({"deleted": deleted, "warnings": change.warnings}).data)
