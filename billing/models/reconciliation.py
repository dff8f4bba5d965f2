"""Reconciliation: daily runs comparing what was billed with what telemetry saw."""

from decimal import Decimal

from django.db import models


class FindingKind(models.TextChoices):
    BILLED_WITHOUT_TELEMETRY = "no_telemetry", "Billed without telemetry"
    TELEMETRY_WITHOUT_ADMISSION = "orphan", "Telemetry without an admission"
    GAP = "gap", "Telemetry gap"


class ReconciliationRun(models.Model):
    """A daily comparison of admissions (what was billed) with telemetry (what ran)."""

    day = models.DateField(unique=True)
    ran_at = models.DateTimeField()
    records = models.PositiveIntegerField(default=0)
    findings_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-day"]

    def __str__(self) -> str:
        return f"reconciliation {self.day}"


class ReconciliationFinding(models.Model):
    """One discrepancy found by a reconciliation run."""

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="findings")
    kind = models.CharField(max_length=16, choices=FindingKind.choices)
    workload_id = models.BigIntegerField(null=True, blank=True)
    workload_name = models.CharField(max_length=63, blank=True)
    queue = models.CharField(max_length=512, blank=True)
    hour = models.DateTimeField()
    minutes = models.PositiveIntegerField(default=0)
    gpu_hours = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))
    message = models.TextField()

    class Meta:
        ordering = ["kind", "hour", "workload_id"]

    def __str__(self) -> str:
        return self.message
