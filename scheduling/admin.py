"""Admin for the fleet: clusters with their nodes inline."""

from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest

from core.history_admin import HistoryAdmin
from scheduling.models import Cluster, Node


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ("name", "flavor", "gpus", "cpu", "memory_gib", "rack", "ready")


@admin.register(Cluster)
class ClusterAdmin(HistoryAdmin):
    list_display = ("name", "kind", "region", "backend", "health", "price", "enabled",
                    "node_count", "gpu_count")
    list_filter = ("kind", "backend", "enabled")
    search_fields = ("name", "region")
    inlines = [NodeInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Cluster]:
        return super().get_queryset(request).annotate(
            n_nodes=Count("nodes"), n_gpus=Sum("nodes__gpus")
        )

    @admin.display(description="nodes", ordering="n_nodes")
    def node_count(self, obj: Cluster) -> int:
        return obj.n_nodes  # type: ignore[attr-defined]

    @admin.display(description="GPUs", ordering="n_gpus")
    def gpu_count(self, obj: Cluster) -> int:
        return obj.n_gpus or 0  # type: ignore[attr-defined]


@admin.register(Node)
class NodeAdmin(HistoryAdmin):
    list_display = ("name", "cluster", "flavor", "gpus", "cpu", "memory_gib", "rack", "ready")
    list_filter = ("cluster", "flavor", "ready")
    list_select_related = ("cluster", "flavor")
    search_fields = ("name", "rack")
