"""Workloads REST API (API.md): submit, list, detail, cancel."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import changes
from core.quantity import resource_quantities
from scheduling import kinds, reasons, selectors, services
from scheduling.filters import WorkloadFilter
from scheduling.models import EventType, Workload
from scheduling.request import validation as limits
from scheduling.request.manifests import derived_pods_data
from scheduling.request.validation import gpus_shown
from scheduling.sessions import session_idle_state


class PodSetInputSerializer(serializers.Serializer):
    count = serializers.IntegerField(min_value=1, max_value=limits.MAX_PODS, default=1)
    flavors = serializers.ListField(child=serializers.CharField(max_length=limits.MAX_NAME),
                                    allow_empty=False)
    gpus = serializers.IntegerField(min_value=0, max_value=limits.MAX_GPUS, default=0)
    # An int default (not Decimal): what validated data held when the field was left out.
    cpu = serializers.DecimalField(max_digits=10, decimal_places=limits.DECIMAL_PLACES,
                                   min_value=0, max_value=limits.MAX_CPU,
                                   default=0)  # type: ignore[arg-type]
    memory_gib = serializers.DecimalField(max_digits=12, decimal_places=limits.DECIMAL_PLACES,
                                          min_value=0, max_value=limits.MAX_MEMORY_GIB,
                                          default=0)  # type: ignore[arg-type]
    gpu_memory_gib = serializers.IntegerField(min_value=1, max_value=limits.MAX_GPU_MEMORY_GIB,
                                              required=False, allow_null=True)
    resources = serializers.DictField(
        child=serializers.JSONField(), required=False,
        help_text="Extended resources per pod, name -> number or Kubernetes quantity, e.g. "
        '{"nvidia.com/mig-1g.10gb": 1}: a resource the flavor\'s nodes advertise.')


# A submission's fields and limits (from scheduling.request.validation), for the API schema
# and an update's partial check; a submission itself is validated by the service alone.
class WorkloadInputSerializer(serializers.Serializer):

    name = serializers.CharField(max_length=limits.MAX_NAME)
    queue = serializers.CharField(max_length=512)
    priority_class = serializers.CharField(max_length=limits.MAX_NAME,
                                           default=limits.DEFAULT_PRIORITY_CLASS)
    preemptible = serializers.BooleanField(default=True)
    checkpoint = serializers.BooleanField(default=True)
    strategy = serializers.ChoiceField(choices=list(limits.STRATEGIES), default="",
                                       allow_blank=True)
    image = serializers.CharField(max_length=limits.MAX_IMAGE, default="", allow_blank=True)
    command = serializers.ListField(child=serializers.CharField(), default=list)
    dataset = serializers.CharField(max_length=limits.MAX_DATASET, default="",
                                    allow_blank=True)
    duration_hint_s = serializers.IntegerField(min_value=1, max_value=limits.MAX_DURATION_S,
                                               required=False, allow_null=True)
    termination_grace_s = serializers.IntegerField(min_value=0, max_value=limits.MAX_GRACE_S,
                                                   default=limits.DEFAULT_GRACE_S)
    topology = serializers.DictField(default=dict)
    labels = serializers.DictField(
        child=serializers.CharField(max_length=limits.MAX_LABEL_VALUE), default=dict)
    interactive = serializers.BooleanField(
        default=False, help_text="An interactive session (a notebook): stopped when its GPUs "
        "stay idle for its queue's idle limit (docs/workload-kinds.md).")
    idle_timeout_s = serializers.IntegerField(
        min_value=limits.MIN_IDLE_S, max_value=limits.MAX_IDLE_S, required=False,
        allow_null=True, help_text="A session's own idle limit (the queue's applies when "
        "shorter).")
    time_limit_s = serializers.IntegerField(
        min_value=limits.MIN_TIME_LIMIT_S, max_value=limits.MAX_DURATION_S, required=False,
        allow_null=True, help_text="A session's time limit (seconds of running), capped by "
        "its session policy's longest; POST .../extend adds to it.")
    pods = PodSetInputSerializer(many=True, allow_empty=False, required=False)
    manifest = serializers.DictField(
        required=False,
        help_text="Instead of pods, image and command: a Kubernetes object of a kind Allot "
                  "runs (docs/workload-kinds.md); its pod sets are derived from it. `name` "
                  "defaults to its metadata.name.")
    flavors = serializers.ListField(
        child=serializers.CharField(), required=False,
        help_text="With a manifest: acceptable flavors in order of preference (default: every "
                  "flavor its nodeSelector allows).")


class PodSetOutputSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    count = serializers.IntegerField()
    flavors = serializers.ListField(child=serializers.CharField())
    gpus = serializers.IntegerField()
    cpu = serializers.DecimalField(max_digits=10, decimal_places=3, coerce_to_string=False)
    memory_gib = serializers.DecimalField(max_digits=12, decimal_places=3,
                                          coerce_to_string=False)
    gpu_memory_gib = serializers.IntegerField(allow_null=True)
    resources = serializers.DictField(
        child=serializers.CharField(),
        help_text="Extended resources per pod as Kubernetes quantities ({} when none).")


class WorkloadListSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    queue = serializers.CharField(source="queue.path")
    team = serializers.CharField(source="team.name", allow_null=True, default=None)
    owner = serializers.CharField(source="owner.username")
    state = serializers.CharField()
    priority_class = serializers.CharField(source="priority_class.name")
    preemptible = serializers.BooleanField()
    checkpoint = serializers.BooleanField()
    submitted_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.SerializerMethodField(
        help_text="{code, message}: the engine's reason code and its exact text (times as "
                  "POSIX seconds, workloads by id), or null.")
    reason_text = serializers.SerializerMethodField(
        help_text="The same reason in plain words, as the pages say it: numbers kept, "
                  "workloads by name, times in ISO 8601 (UTC); null without a reason.")
    gpus = serializers.SerializerMethodField()
    pod_sets = PodSetOutputSerializer(many=True)

    def get_reason(self, obj: Workload) -> dict[str, str] | None:
        if not obj.reason_code:
            return None
        return {"code": obj.reason_code, "message": obj.reason_message}

    def get_reason_text(self, obj: Workload) -> str | None:
        return reasons.reason_text(obj.reason_code, obj.reason_message,
                                   names=_names_for(self.context, [obj]))

    def get_gpus(self, obj: Workload) -> int | float:
        return gpus_shown(sum((ps.count * ps.gpus for ps in obj.pod_sets.all()), Decimal(0)))

    def to_representation(self, instance: Workload) -> dict[str, Any]:
        return workload_list_data(instance, names=_names_for(self.context, [instance]))


class WorkloadDetailSerializer(WorkloadListSerializer):
    strategy = serializers.CharField()
    image = serializers.CharField()
    command = serializers.ListField(child=serializers.CharField())
    dataset = serializers.CharField()
    duration_hint_s = serializers.IntegerField(allow_null=True)
    termination_grace_s = serializers.IntegerField()
    topology = serializers.DictField()
    labels = serializers.DictField()
    progress_s = serializers.FloatField()
    interactive = serializers.BooleanField()
    idle = serializers.DictField(
        allow_null=True, read_only=True,
        help_text="A session's limits and idling: {timeout_s, threshold_pct, idle_since, "
        "warned_at, stops_at, idle_s, time_limit_s, max_time_s, running_since, ends_at, "
        "ends_soon, sources: {timeout_s, threshold_pct, max_time_s, time_limit_s}}; null for "
        "a batch workload.")
    backoff_count = serializers.IntegerField()
    not_before = serializers.DateTimeField(allow_null=True)
    queue_position = serializers.DictField(allow_null=True, read_only=True)
    reasons = serializers.ListField(
        child=serializers.DictField(), read_only=True,
        help_text="Every reason given, oldest first: {code, message (the engine's text), "
                  "text (plain words, ISO 8601 times), at}.")
    admission = serializers.DictField(allow_null=True, read_only=True)
    admissions = serializers.ListField(child=serializers.DictField(), read_only=True)
    events = serializers.ListField(
        child=serializers.DictField(), read_only=True,
        help_text="The timeline, oldest first: {at, type, actor, code, message, payload}; type "
                  "is one of " + ", ".join(EventType.values) + ".")
    pods = serializers.ListField(child=serializers.DictField(), read_only=True)
    kind = serializers.CharField(
        help_text="apiVersion/Kind of a workload submitted as a manifest; empty for Allot's "
                  "own Jobs (pods, image, command).")
    derived_pods = serializers.ListField(
        child=serializers.DictField(), read_only=True,
        help_text="A manifest's pod sets as Allot counts them: {name, count, path, requests: "
                  "{cpu, memory_gib, gpus, other resources}} per pod (gpus a fraction for a "
                  "share of a card, null for a memory slice alone, given in gpu_memory_mib); "
                  "[] without a manifest.")

    @staticmethod
    def _admission(a: Any) -> dict[str, Any]:
        return {
            "cluster": a.cluster.name, "flavor": a.flavor.name, "nodes": a.nodes,
            "borrowed": a.borrowed, "gpus": gpus_shown(a.gpus), "cards": list(a.cards or []),
            "admitted_at": a.reserved_at,
            "dispatched_at": a.dispatched_at, "running_at": a.running_at,
            "ended_at": a.ended_at, "end_reason": a.end_reason,
        }

    def to_representation(self, instance: Workload) -> dict[str, Any]:
        return workload_detail_data(instance, names=_names_for(self.context, [instance],
                                                               events=True))


def _names_for(context: Mapping[str, Any], workloads: list[Workload], *, events: bool = False
               ) -> dict[int, tuple[str, bool]]:
    """The names of the workloads the reasons of `workloads` (and their reason events, with
    `events`) mention, as the requesting user may see them: one query."""
    request = context.get("request")
    user = getattr(request, "user", None)
    messages = [w.reason_message for w in workloads]
    if events:
        messages += [e.message for w in workloads for e in w.events.all()]
    return reasons.reason_names(user, messages) if user is not None else {}


def _decimal(value: Any) -> Decimal:
    # As DecimalField(decimal_places=3, coerce_to_string=False): quantized, rendered as float.
    return (value if isinstance(value, Decimal) else Decimal(str(value).strip())).quantize(
        Decimal("0.001"))


def _pod_set(ps: Any) -> dict[str, Any]:
    return {"index": int(ps.index), "count": int(ps.count),
            "flavors": [str(f) for f in ps.flavors], "gpus": gpus_shown(ps.gpus),
            "cpu": _decimal(ps.cpu), "memory_gib": _decimal(ps.memory_gib),
            "gpu_memory_gib": None if ps.gpu_memory_gib is None else int(ps.gpu_memory_gib),
            "resources": resource_quantities(ps.resources)}


def workload_list_data(obj: Workload, *, pod_sets: list[Any] | None = None,
                       names: dict[int, tuple[str, bool]] | None = None) -> dict[str, Any]:
    """A workload of the list, as `WorkloadListSerializer` declares it (the serializer returns
    this; a test pins it equal to what its fields make of the workload).

    Built without DRF's per-field machinery, as the detail is: a page holds up to 1,000
    workloads (`?page_size=`), and those fields cost more than reading the rows.
    """
    pod_sets = list(obj.pod_sets.all()) if pod_sets is None else pod_sets
    return {
        "id": obj.pk, "name": str(obj.name), "queue": str(obj.queue.path),
        "team": None if obj.team is None else str(obj.team.name),
        "owner": str(obj.owner.username), "state": str(obj.state),
        "priority_class": str(obj.priority_class.name), "preemptible": bool(obj.preemptible),
        "checkpoint": bool(obj.checkpoint), "submitted_at": obj.submitted_at,
        "finished_at": obj.finished_at,
        "reason": ({"code": obj.reason_code, "message": obj.reason_message}
                   if obj.reason_code else None),
        "reason_text": reasons.reason_text(obj.reason_code, obj.reason_message, names=names),
        "gpus": gpus_shown(sum((ps.count * ps.gpus for ps in pod_sets), Decimal(0))),
        "pod_sets": [_pod_set(ps) for ps in pod_sets],
    }


class GangSerializer(serializers.Serializer):
    """One workload of a submission split into gangs (a LeaderWorkerSet's replica group)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.CharField()


class WorkloadSubmittedSerializer(WorkloadDetailSerializer):
    """A submission's 201 answer: the workload's detail; split into gangs (a LeaderWorkerSet
    of several groups), the first one's, with every gang's workload in `gangs`."""

    gangs = GangSerializer(many=True, required=False)


def workload_detail_data(obj: Workload, *, pod_sets: list[Any] | None = None,
                         events: list[Any] | None = None,
                         admissions: list[Any] | None = None,
                         names: dict[int, tuple[str, bool]] | None = None) -> dict[str, Any]:
    """A workload's detail, as `WorkloadDetailSerializer` declares it (the serializer returns
    this; its fields describe it for the schema, and a test pins the keys equal).

    Built without DRF's per-field machinery: a submission's 201 answer is on the hot path,
    and passes the rows it just wrote (`pod_sets`, `events`, `admissions`) so nothing is read
    back. Datetimes are left to the JSON renderer (UTC, `Z`, as DateTimeField renders them).
    """
    pod_sets = list(obj.pod_sets.all()) if pod_sets is None else pod_sets
    admissions = list(obj.admissions.all()) if admissions is None else admissions
    events = list(obj.events.all()) if events is None else events
    current = selectors.workload_current_admission(obj, admissions)
    return {
        **workload_list_data(obj, pod_sets=pod_sets, names=names),
        "strategy": str(obj.strategy), "image": str(obj.image),
        "command": [str(c) for c in obj.command], "dataset": str(obj.dataset),
        "duration_hint_s": None if obj.duration_hint_s is None else int(obj.duration_hint_s),
        "termination_grace_s": int(obj.termination_grace_s),
        "topology": {str(k): v for k, v in obj.topology.items()},
        "labels": {str(k): v for k, v in obj.labels.items()},
        "progress_s": float(obj.progress_s), "backoff_count": int(obj.backoff_count),
        "interactive": bool(obj.interactive), "idle": session_idle_state(obj),
        "not_before": obj.not_before,
        "queue_position": selectors.workload_queue_position(obj, pod_sets=pod_sets),
        "reasons": [{**r, "text": reasons.reason_text(r["code"], r["message"], names=names)}
                    for r in selectors.workload_reasons(obj, events)],
        "admission": WorkloadDetailSerializer._admission(current) if current is not None
        else None,
        "admissions": [WorkloadDetailSerializer._admission(a) for a in admissions],
        "events": [
            {"at": e.at, "type": e.type, "actor": e.actor.username if e.actor else None,
             "code": e.code, "message": e.message, "payload": e.payload}
            for e in events
        ],
        "pods": selectors.workload_pods(obj, current, pod_sets),
        "kind": str(obj.kind),
        "derived_pods": manifest_pods(obj),
    }


def manifest_pods(obj: Workload) -> list[dict[str, Any]]:
    """The pod sets of a manifest workload, derived again from its manifest."""
    if not obj.kind:
        return []
    kind = kinds.kind_named(obj.kind)
    if kind is None:
        return []
    try:
        return derived_pods_data(kind.derive(dict(obj.manifest)))
    except kinds.ManifestError:
        return []


def _detail(request: Request, pk: int) -> Workload:
    workload = selectors.workload_get(user=request.user, pk=pk)
    if workload is None:
        raise Http404("no such workload")
    return workload


class WorkloadListCreateApi(generics.ListAPIView):
    """List visible workloads (newest first, filterable) or submit one."""

    serializer_class = WorkloadListSerializer
    filterset_class = WorkloadFilter

    def get_queryset(self):  # type: ignore[no-untyped-def]
        if getattr(self, "swagger_fake_view", False):  # the schema is built with no user
            return Workload.objects.none()
        return selectors.workload_list(user=self.request.user)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A page of workloads; the workloads their reasons name are looked up once for the
        page (`reason_text`), not per row."""
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(queryset) if page is None else page
        names = _names_for({"request": request}, rows)
        data = [workload_list_data(w, names=names) for w in rows]
        return Response(data) if page is None else self.get_paginated_response(data)

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """A submission checks the change log once, before its token is looked up: the token
        lookup and the submission's lookups and checks (which only read) use that one view, as
        if the whole request had been taken at that moment. A list checks as usual."""
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        with changes.pinned():
            return super().dispatch(request, *args, **kwargs)

    @extend_schema(request=WorkloadInputSerializer, responses={201: WorkloadSubmittedSerializer})
    def post(self, request: Request) -> Response:
        # The service validates the input (400 naming each bad field, nothing saved) and hands
        # back what it wrote, so the answer needs no read-back.
        payload: Any = request.data  # not a JSON object: a 400 from the service
        done = services.workload_submit_detailed(user=request.user, data=payload)
        # A rejection's reasons name no other workload: no names to look up.
        data = workload_detail_data(done.workload, pod_sets=done.pod_sets, events=done.events,
                                    admissions=[], names={})
        if done.gangs:  # split into gangs (a LeaderWorkerSet's groups): this is the first
            data["gangs"] = [{"id": w.pk, "name": w.name, "state": str(w.state)}
                             for w in done.gangs]
        return Response(data, status=status.HTTP_201_CREATED)


class WorkloadDetailApi(APIView):
    """One workload with its reasons, admission, timeline, pods and queue position."""

    @extend_schema(responses=WorkloadDetailSerializer)
    def get(self, request: Request, pk: int) -> Response:
        return Response(WorkloadDetailSerializer(_detail(request, pk),
                                                 context={"request": request}).data)


class WorkloadCancelApi(APIView):
    """Cancel a workload (owner, team lead or admin)."""

    @extend_schema(request=None, responses=WorkloadDetailSerializer)
    def post(self, request: Request, pk: int) -> Response:
        workload = _detail(request, pk)
        services.workload_cancel(user=request.user, workload=workload)
        return Response(WorkloadDetailSerializer(_detail(request, pk),
                                                 context={"request": request}).data)
