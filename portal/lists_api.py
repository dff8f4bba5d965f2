"""API twins of the views users asked for (issue 15): a queue's pending list with positions,
who lends to whom, a workload's GPU utilisation, global search, notifications and the
profile's settings."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.utils.html import strip_tags
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.pages.access import signed_in, user_scope
from quotas.models import Queue


def _visible_queue(user: Any, path: str) -> Queue:
    queue = Queue.objects.filter(path=path.strip("/")).first()
    if queue is None or not user_scope(user).can_see_queue(queue.pk):
        raise Http404(f"No queue at path {path!r}.")
    return queue


class PendingRowOutput(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="null: another team's workload")
    name = serializers.CharField(allow_null=True)
    queue = serializers.CharField()
    priority_class = serializers.CharField()
    gpus = serializers.CharField()
    flavors = serializers.ListField(child=serializers.CharField())
    position_in_queue = serializers.IntegerField(allow_null=True)
    ahead_gpus = serializers.IntegerField(allow_null=True)
    position_in_fleet = serializers.IntegerField(allow_null=True)
    needs_approval = serializers.BooleanField()
    estimated_start = serializers.DateTimeField(allow_null=True)
    estimated_start_range = serializers.DictField(allow_null=True)
    reason_code = serializers.CharField()
    reason = serializers.CharField()


class PendingOutput(serializers.Serializer):
    queue = serializers.CharField()
    total = serializers.IntegerField()
    as_of = serializers.DateTimeField()
    fleet_pending = serializers.IntegerField()
    results = PendingRowOutput(many=True)


class QueuePendingApi(APIView):
    @extend_schema(summary="A queue's pending workloads in admission order, with their place "
                   "in their queue and across the fleet, the reason and the estimated start",
                   responses=PendingOutput)
    def get(self, request: Request, path: str) -> Response:
        from scheduling.reasons import reason_plain
        from scheduling.selectors import queue_pending

        queue = _visible_queue(request.user, path)
        data = queue_pending(user=request.user, path=queue.path)
        rows = []
        for r in data["rows"]:
            w, p = r["workload"], r["position"] or {}
            rows.append({
                "id": w.pk if r["visible"] else None,
                "name": w.name if r["visible"] else None,
                "queue": w.queue.path, "priority_class": w.priority_class.name,
                "gpus": str(r["gpus"]), "flavors": r["flavors"],
                "position_in_queue": p.get("in_queue"), "ahead_gpus": p.get("ahead_gpus"),
                "position_in_fleet": r["fleet_position"],
                "needs_approval": w.needs_approval,
                "estimated_start": p.get("estimated_start"),
                "estimated_start_range": p.get("estimated_start_range"),
                "reason_code": w.reason_code,
                "reason": (strip_tags(reason_plain(w.reason_code, w.reason_message).html)
                           if r["visible"] and w.reason_code else ""),
            })
        return Response({"queue": queue.path, "total": data["total"], "as_of": data["as_of"],
                         "fleet_pending": data["fleet_pending"], "results": rows})


class SearchOutput(serializers.Serializer):
    q = serializers.CharField()
    workloads = serializers.ListField(child=serializers.DictField())
    queues = serializers.ListField(child=serializers.DictField())
    users = serializers.ListField(child=serializers.DictField())


class SearchApi(APIView):
    @extend_schema(summary="Workloads, queues and users matching `q` that you may see",
                   responses=SearchOutput)
    def get(self, request: Request) -> Response:
        from portal.search import SearchError, search_query_clean, site_search

        try:
            found = site_search(user=request.user,
                                q=search_query_clean(request.query_params.get("q", "")))
        except SearchError as exc:
            raise ValidationError({"q": [str(exc)]}) from exc
        return Response({
            "q": found["q"],
            "workloads": [{"id": w.pk, "name": w.name, "queue": w.queue.path,
                           "owner": w.owner.username, "state": w.state}
                          for w in found["workloads"]],
            "queues": [{"path": q.path} for q in found["queues"]],
            "users": [{"username": u.username, "name": u.get_full_name()}
                      for u in found["users"]],
        })


class NotificationOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    created_at = serializers.DateTimeField()
    subject = serializers.CharField()
    body = serializers.CharField()
    url = serializers.CharField()
    workload_id = serializers.IntegerField(allow_null=True)
    read_at = serializers.DateTimeField(allow_null=True)


class NotificationsApi(APIView):
    @extend_schema(summary="Your notifications, newest first (the latest 100)",
                   responses=NotificationOutput(many=True))
    def get(self, request: Request) -> Response:
        from portal.models import Notification

        qs = Notification.objects.filter(user=signed_in(request.user))
        if request.query_params.get("unread") in ("1", "true"):
            qs = qs.filter(read_at__isnull=True)
        return Response(NotificationOutput(qs[:100], many=True).data)


class NotificationsReadInput(serializers.Serializer):
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False,
                                help_text="Which to mark read; all of yours when left out.")


class NotificationsReadApi(APIView):
    @extend_schema(summary="Mark your notifications read (some or all)",
                   request=NotificationsReadInput,
                   responses=inline_serializer("MarkedOutput",
                                               {"marked": serializers.IntegerField()}))
    def post(self, request: Request) -> Response:
        from portal.notifications import notifications_mark_read

        data = NotificationsReadInput(data=request.data)
        data.is_valid(raise_exception=True)
        n = notifications_mark_read(user=request.user, ids=data.validated_data.get("ids"))
        return Response({"marked": n})


class SettingsInput(serializers.Serializer):
    time_zone = serializers.CharField(required=False, allow_blank=True, max_length=64)
    muted_kinds = serializers.ListField(child=serializers.CharField(), required=False)

    def validate_time_zone(self, value: str) -> str:
        from portal.timezones import zone_of

        if value and zone_of(value) is None:
            raise serializers.ValidationError(
                f"{value!r} is not a time zone this server knows (an IANA name such as "
                "'Europe/Berlin'; empty for the server's)")
        return value

    def validate_muted_kinds(self, value: list[str]) -> list[str]:
        from portal.models import NotificationKind

        unknown = sorted(set(value) - set(NotificationKind.values))
        if unknown:
            raise serializers.ValidationError(
                f"unknown kind(s) {', '.join(unknown)}: one of "
                f"{', '.join(NotificationKind.values)}")
        return value


class AccountSettingsApi(APIView):
    @extend_schema(summary="Your settings: time zone and muted notification kinds",
                   responses=SettingsInput)
    def get(self, request: Request) -> Response:
        from portal.notifications import user_settings

        row = user_settings(request.user)
        return Response({"time_zone": row.time_zone, "muted_kinds": row.muted_kinds})

    @extend_schema(summary="Change your settings (nothing is saved when a field is wrong)",
                   request=SettingsInput, responses=SettingsInput)
    def patch(self, request: Request) -> Response:
        from portal.account import profile_settings_save
        from portal.notifications import user_settings

        data = SettingsInput(data=request.data)
        data.is_valid(raise_exception=True)
        row = user_settings(request.user)
        v = data.validated_data
        profile_settings_save(user=request.user, time_zone=v.get("time_zone", row.time_zone),
                              muted_kinds=v.get("muted_kinds", row.muted_kinds))
        row.refresh_from_db()
        return Response({"time_zone": row.time_zone, "muted_kinds": row.muted_kinds})


class BorrowingGroupOutput(serializers.Serializer):
    parent_path = serializers.CharField(allow_null=True, help_text="'' for the top level; null: "
                                   "another team's queue")
    flavor = serializers.CharField()
    borrowed = serializers.CharField()
    lent = serializers.CharField()
    from_above = serializers.CharField()
    borrowers = serializers.ListField(child=serializers.DictField())
    lenders = serializers.ListField(child=serializers.DictField())


class BorrowingApi(APIView):
    @extend_schema(summary="Who lends to whom now: per GPU model, each group of sibling queues "
                   "where some borrow, with borrowers, lenders and what comes from above",
                   responses=inline_serializer("BorrowingOutput", {
                       "results": BorrowingGroupOutput(many=True)}))
    def get(self, request: Request) -> Response:
        from portal.pages.selectors import borrowing_now

        def num(v: Any) -> str:
            return str(v)

        groups = borrowing_now(scope=user_scope(request.user))
        return Response({"results": [{
            "parent_path": g["parent"]["path"], "flavor": g["flavor"],
            "borrowed": num(g["borrowed"]), "lent": num(g["lent"]),
            "from_above": num(g["from_above"]),
            "borrowers": [{"queue": b["path"], "borrowed": num(b["borrowed"]),
                           "used": num(b["used"]), "min": num(b["min"])}
                          for b in g["borrowers"]],
            "lenders": [{"queue": x["path"], "lent": num(x["lent"]), "used": num(x["used"]),
                         "min": num(x["min"])} for x in g["lenders"]],
        } for g in groups]})


class UtilisationOutput(serializers.Serializer):
    workload = serializers.IntegerField()
    overall = serializers.CharField(allow_null=True)
    active_gpu_hours = serializers.CharField(allow_null=True)
    metered_gpu_hours = serializers.CharField(allow_null=True)
    telemetry = serializers.BooleanField()
    hours = serializers.ListField(child=serializers.DictField())


class WorkloadUtilisationApi(APIView):
    @extend_schema(summary="A workload's GPU utilisation from telemetry: overall and per hour "
                   "(null: no telemetry)", responses=UtilisationOutput)
    def get(self, request: Request, pk: int) -> Response:
        from billing.selectors import workload_utilisation
        from scheduling.selectors import workloads_visible

        if not workloads_visible(request.user).filter(pk=pk).exists():
            raise Http404("No such workload.")
        util = workload_utilisation(pk)

        def num(v: Any) -> str | None:
            return None if v is None else str(v)

        return Response({
            "workload": pk, "overall": num(util["overall"]),
            "active_gpu_hours": num(util["active_gpu_hours"]),
            "metered_gpu_hours": num(util["metered_gpu_hours"]),
            "telemetry": util["overall"] is not None,
            "hours": [{"hour": h["hour"], "utilisation": num(h["utilisation"]),
                       "gpu_hours": num(h["gpu_hours"]),
                       "telemetry_minutes": h["telemetry_minutes"]} for h in util["hours"]],
        })
