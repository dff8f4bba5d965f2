"""Simulated clusters in the Django admin: their Jobs, switches and events (read mostly)."""

from django.contrib import admin
from django.utils import timezone

from scheduling.backends.simulated.models import SimControl, SimEvent, SimJob


@admin.register(SimJob)
class SimJobAdmin(admin.ModelAdmin):
    list_display = ("name", "cluster", "namespace", "pods", "gpus_per_pod", "state",
                    "duration_s", "speedup", "created_at", "started_at")
    list_filter = ("cluster", "suspended", "namespace")
    search_fields = ("name", "namespace")
    readonly_fields = ("created_at", "started_at", "suspended_at")

    @admin.display(description="pods now")
    def state(self, job: SimJob) -> str:
        pods = job.pods_at(timezone.now())
        if pods.suspended:
            return "suspended"
        if pods.job_failed:
            return "failed"
        return f"{pods.pending} pending, {pods.running} running, {pods.succeeded} succeeded"


@admin.register(SimControl)
class SimControlAdmin(admin.ModelAdmin):
    list_display = ("cluster", "refuse", "refuse_next", "fail_next", "updated_at")


@admin.register(SimEvent)
class SimEventAdmin(admin.ModelAdmin):
    list_display = ("at", "cluster", "namespace", "job_name", "type", "reason", "note")
    list_filter = ("cluster", "type", "reason")
    search_fields = ("job_name", "note")
