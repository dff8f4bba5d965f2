"""API for the fleet: clusters with capacity, used and health per flavor; nodes in detail."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.permissions import IsAdminOrReadOnly
from quotas import selectors


def _dec() -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=3, coerce_to_string=False)


class AmountsOutput(serializers.Serializer):
    gpu = serializers.IntegerField()
    cpu = _dec()
    memory = _dec()


class ClusterFlavorOutput(serializers.Serializer):
    capacity = AmountsOutput(help_text="Installed on all nodes of this flavor.")
    allocatable = AmountsOutput(help_text="On ready nodes.")
    used = AmountsOutput(help_text="Taken by admitted workloads.")
    free = serializers.IntegerField(help_text="GPUs on ready nodes not taken (never below 0): "
                                    "the same number as the fleet page and the dashboard.")
    nodes = serializers.IntegerField()
    ready_nodes = serializers.IntegerField()
    health = serializers.FloatField(help_text="Cluster health x share of ready nodes.")


class NodeOutput(serializers.Serializer):
    name = serializers.CharField()
    flavor = serializers.CharField()
    gpus = serializers.IntegerField()
    cpu = _dec()
    memory_gib = _dec()
    rack = serializers.CharField()
    ready = serializers.BooleanField()
    labels = serializers.DictField(child=serializers.CharField())


class ClusterOutput(serializers.Serializer):
    name = serializers.CharField()
    region = serializers.CharField()
    kind = serializers.CharField()
    backend = serializers.CharField()
    health = serializers.FloatField()
    price = _dec()
    datasets = serializers.ListField(child=serializers.CharField())
    enabled = serializers.BooleanField()
    flavors = serializers.DictField(child=ClusterFlavorOutput())


class ClusterDetailOutput(ClusterOutput):
    nodes = NodeOutput(many=True)


class ClusterList(APIView):
    """The clusters: capacity, used and health per flavor."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=ClusterOutput(many=True))
    def get(self, request: Request) -> Response:
        return Response(ClusterOutput(selectors.cluster_list(), many=True).data)


class ClusterDetail(APIView):
    """One cluster with its nodes."""

    permission_classes = [IsAdminOrReadOnly]

    @extend_schema(responses=ClusterDetailOutput)
    def get(self, request: Request, name: str) -> Response:
        found = selectors.cluster_list(name=name)
        if not found:
            raise Http404(f"No cluster named {name!r}.")
        return Response(ClusterDetailOutput(found[0]).data)
