"""Admin: cost centers, rates and budgets are edited here; the ledger is read-only."""

from django.contrib import admin

from billing import models
from core.history_admin import HistoryAdmin


@admin.register(models.CostCenter)
class CostCenterAdmin(admin.ModelAdmin):
    list_display = ["code", "name", "charge_basis", "usage_share", "currency", "is_default"]


@admin.register(models.TeamCostCenter)
class TeamCostCenterAdmin(admin.ModelAdmin):
    list_display = ["team", "cost_center"]


class ThresholdInline(admin.TabularInline):
    model = models.BudgetThreshold
    extra = 0


@admin.register(models.Budget)
class BudgetAdmin(HistoryAdmin):
    list_display = ["cost_center", "period", "amount", "currency", "active"]
    inlines = [ThresholdInline]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Finance records: visible, never edited or deleted here (corrections are new entries)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(models.RateCard)
class RateCardAdmin(HistoryAdmin, ReadOnlyAdmin):
    list_display = ["flavor", "resource", "version", "effective_from", "rate", "frozen_rate",
                    "currency"]


@admin.register(models.LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["seq", "hour", "cost_center", "team_name", "queue", "workload_id", "kind",
                    "quantity", "unit", "amount", "currency"]
    list_filter = ["cost_center", "kind"]


@admin.register(models.UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["hour", "workload_id", "phase", "gpus", "gpu_hours", "active_gpu_hours",
                    "gap_minutes"]


@admin.register(models.Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    list_display = ["number", "cost_center", "period_start", "total", "currency", "state"]


@admin.register(models.BudgetFiring)
class BudgetFiringAdmin(ReadOnlyAdmin):
    list_display = ["fired_at", "threshold", "spent", "budget_amount"]
