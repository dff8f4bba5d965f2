"""Django admin for policies (read-mostly: the pages and services keep versions)."""

from django.contrib import admin

from core.history_admin import HistoryAdmin

from .models import Policy, PolicyVersion, PolicyViolation, SessionPolicy, TeamApproval


@admin.register(Policy)
class PolicyAdmin(HistoryAdmin):
    list_display = ("name", "kind", "mode", "version", "hits", "denials", "updated_at")
    list_filter = ("kind", "mode")
    search_fields = ("name", "description")
    # Edits go through the policy pages so each one is checked and versioned.
    readonly_fields = [f.name for f in Policy._meta.get_fields() if hasattr(f, "attname")]

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ("policy", "version", "author", "at", "comment")
    list_filter = ("policy",)


@admin.register(PolicyViolation)
class PolicyViolationAdmin(admin.ModelAdmin):
    list_display = ("at", "policy", "outcome", "mode", "subject", "queue_path", "user")
    list_filter = ("outcome", "mode", "policy")
    search_fields = ("subject", "message", "queue_path")


@admin.register(TeamApproval)
class TeamApprovalAdmin(admin.ModelAdmin):
    list_display = ("team", "name", "granted_by", "granted_at", "expires_at")
    list_filter = ("name",)


@admin.register(SessionPolicy)
class SessionPolicyAdmin(admin.ModelAdmin):
    list_display = ("name", "queues", "users", "idle_timeout_s", "idle_gpu_util_pct",
                    "max_time_s", "enabled")
    list_filter = ("enabled",)
    search_fields = ("name", "description")
