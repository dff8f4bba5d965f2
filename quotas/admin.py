"""Admin for the quota tree: queues shown as a tree, quotas inline, the tree rules enforced.

Queue saves and deletes go through `quotas.services` (the same rules as the API and the
importers): a change that breaks a rule shows its messages above the quota inline and saves
nothing; warnings are shown as messages after saving.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from core.history_admin import HistoryAdmin
from quotas import services
from quotas.models import Flavor, Queue, QuotaEntry, Team, TeamMembership
from quotas.tree_rules import QuotaSpec, fmt


class _DryRun(Exception):
    """Raised inside a transaction to undo a trial run of a service."""


def _quota_from_formset(formset: BaseInlineFormSet) -> dict[tuple[str, str], QuotaSpec]:
    quota: dict[tuple[str, str], QuotaSpec] = {}
    for form in formset.forms:
        data = getattr(form, "cleaned_data", None)
        if not data or data.get("DELETE") or not data.get("flavor"):
            continue
        key = (data["flavor"].name, data["resource"])
        if key in quota:
            raise ValidationError(f"{key[0]}/{key[1]} is listed twice")
        quota[key] = QuotaSpec(
            min=data.get("min") or 0, max=data.get("max"), lendable=data.get("lendable")
        )
    return quota


def _apply(queue: Queue, quota: dict[tuple[str, str], QuotaSpec]) -> services.TreeChange:
    """Run the tree service for the queue as the admin form left it (unsaved)."""
    parent = queue.parent
    if queue.pk is None:
        return services.queue_create(
            name=queue.name, parent=parent, quota=quota, strategy=queue.strategy,
            namespace=queue.namespace, description=queue.description,
        )
    return services.queue_update(
        queue=queue, name=queue.name, parent=parent, quota=quota, strategy=queue.strategy,
        namespace=queue.namespace, description=queue.description,
    )


class QuotaInlineFormSet(BaseInlineFormSet):
    """Validates the queue and its quotas together by a trial run of the tree service."""

    def clean(self) -> None:
        super().clean()
        if any(self.errors) or not self.instance.name:
            return
        quota = _quota_from_formset(self)
        try:
            with transaction.atomic():
                _apply(self.instance, quota)
                raise _DryRun
        except _DryRun:
            pass
        except ValidationError as exc:
            raise ValidationError(exc.messages) from exc


class QuotaEntryInline(admin.TabularInline):
    model = QuotaEntry
    formset = QuotaInlineFormSet
    extra = 1
    fields = ("flavor", "resource", "min", "max", "lendable")


@admin.register(Queue)
class QueueAdmin(HistoryAdmin):
    """The tree, indented by depth; saving runs the tree rules."""

    list_display = ("tree_name", "namespace", "strategy", "quota_summary")
    search_fields = ("path", "namespace", "description")
    readonly_fields = ("path", "depth")
    fields = ("parent", "name", "path", "depth", "strategy", "namespace", "description",
              "idle_timeout_s", "idle_gpu_util_pct")
    inlines = [QuotaEntryInline]
    ordering = ("path",)
    actions = None  # bulk delete would skip the tree rules

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return super().get_queryset(request).prefetch_related("quotas__flavor")

    @admin.display(description="queue", ordering="path")
    def tree_name(self, obj: Queue) -> str:
        return format_html(
            '<span style="padding-left:{}em">{}{}</span>',
            (obj.depth - 1) * 1.5, "└ " if obj.depth > 1 else "", obj.name,
        )

    @admin.display(description="quota (min / max / lendable)")
    def quota_summary(self, obj: Queue) -> str:
        return format_html_join(
            ", ", "{} {}/{}/{}",
            ((e.key, fmt(e.min), fmt(e.max) if e.max is not None else "–",
              fmt(e.lendable) if e.lendable is not None else "–") for e in obj.quotas.all()),
        )

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        """Saved with its quotas by the tree service in save_related."""

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        quota_formset = next(f for f in formsets if isinstance(f, QuotaInlineFormSet))
        result = _apply(form.instance, _quota_from_formset(quota_formset))
        saved = result.queue
        assert saved is not None
        form.instance.pk = saved.pk
        form.instance.path, form.instance.depth = saved.path, saved.depth
        for formset in formsets:  # the admin's change message reads these
            formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for warning in result.warnings:
            messages.warning(request, f"Saved with a warning: {warning}")

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "POST" and request.POST.get("post"):
            queue = self.get_object(request, object_id)
            if queue is not None and self.has_delete_permission(request, queue):
                try:
                    result = services.queue_delete(queue=queue)
                except ValidationError as exc:
                    for message in exc.messages:
                        messages.error(request, message)
                    return HttpResponseRedirect(
                        reverse("admin:quotas_queue_change", args=[queue.pk])
                    )
                messages.success(request, f"Deleted queue {queue.path}.")
                for warning in result.warnings:
                    messages.warning(request, warning)
                return HttpResponseRedirect(reverse("admin:quotas_queue_changelist"))
        return super().delete_view(request, object_id, extra_context)


@admin.register(Flavor)
class FlavorAdmin(HistoryAdmin):
    list_display = ("name", "gpu_memory_gib", "node_selector", "interconnect_label")
    search_fields = ("name",)


@admin.register(QuotaEntry)
class QuotaEntryAdmin(HistoryAdmin):
    """Read-only list: quotas change on their queue's page, where the tree rules run."""

    list_display = ("queue", "flavor", "resource", "min", "max", "lendable")
    list_filter = ("flavor", "resource")
    list_select_related = ("queue", "flavor")
    search_fields = ("queue__path",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class TeamMembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 1
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name", "display_name", "department", "queue_paths")
    search_fields = ("name", "display_name")
    filter_horizontal = ("queues",)
    inlines = [TeamMembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        return super().get_queryset(request).select_related("department").prefetch_related(
            "queues"
        )

    @admin.display(description="queues")
    def queue_paths(self, obj: Team) -> str:
        return ", ".join(q.path for q in obj.queues.all())


@admin.register(TeamMembership)
class TeamMembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "team", "role")
    list_filter = ("role", "team")
    list_select_related = ("user", "team")
    autocomplete_fields = ("user",)
