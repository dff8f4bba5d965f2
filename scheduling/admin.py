"""Admin for the fleet: clusters with their nodes inline; the outbox of cluster calls."""

from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.http import HttpRequest

from core.history_admin import HistoryAdmin
from scheduling.models import Cluster, Node, OutboxMessage


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


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    """Cluster calls waiting for delivery (and recently delivered): a row with many attempts
    is a release, suspend or dispatch the cluster keeps failing; its last error says why."""

    list_display = ("id", "kind", "cluster", "admission", "attempts", "created_at",
                    "next_attempt_at", "delivered_at", "short_error")
    list_filter = (("delivered_at", admin.EmptyFieldListFilter), "kind", "cluster")
    list_select_related = ("cluster",)
    search_fields = ("=admission__id", "=admission__workload__id", "last_error")
    readonly_fields = ("kind", "cluster", "admission", "payload", "created_at", "attempts",
                       "delivered_at", "last_error")
    fields = (*readonly_fields[:5], "next_attempt_at", *readonly_fields[5:])
    actions = ["retry_now"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="last error")
    def short_error(self, obj: OutboxMessage) -> str:
        return obj.last_error[:120]

    @admin.action(description="Retry the selected undelivered rows now")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        from django.utils import timezone

        n = queryset.filter(delivered_at__isnull=True).update(next_attempt_at=timezone.now())
        self.message_user(request, f"{n} row(s) due now; the next delivery pass sends them.")
