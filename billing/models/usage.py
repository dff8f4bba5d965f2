"""Metering: what each admission held per hour, and telemetry seen without an admission."""

from decimal import Decimal

from django.db import models

from billing.models.rounding import QUANTITY_PLACES


class Phase(models.TextChoices):
    FROZEN = "frozen", "Frozen (reserved, pods not running)"
    RUNNING = "running", "Running"


class UsageRecord(models.Model):
    """What one admission held during one hour, in one phase, and what telemetry saw.

    `active_gpu_hours` is None when no telemetry covered any minute (a gap, never zero).
    """

    hour = models.DateTimeField(db_index=True)
    admission_id = models.BigIntegerField()
    workload_id = models.BigIntegerField(db_index=True)
    workload_name = models.CharField(max_length=63)
    phase = models.CharField(max_length=8, choices=Phase.choices)
    start = models.DateTimeField()
    end = models.DateTimeField()
    cluster = models.CharField(max_length=63)
    flavor = models.CharField(max_length=63)
    queue = models.CharField(max_length=512)
    team = models.ForeignKey(
        "quotas.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpus = models.DecimalField(max_digits=12, decimal_places=3)
    gpu_equivalents = models.DecimalField(
        max_digits=12, decimal_places=6, default=Decimal(0),
        help_text="MIG slices held, in cards (each slice its GPU-equivalent): billed as GPUs.",
    )
    fraction_gpus = models.DecimalField(
        max_digits=12, decimal_places=3, default=Decimal(0),
        help_text="The part of `gpus` held as fractions of a card (pods asking less than one "
        "card): priced at the flavor's `gpu-fraction` rate where it has one.",
    )
    slices = models.JSONField(
        default=dict, blank=True,
        help_text="MIG slices held, per profile: [instances, cards] as decimal strings (their "
        "cards are part of `gpu_equivalents`); a profile with its own rate is priced per "
        "slice-hour.",
    )
    cpu = models.DecimalField(max_digits=12, decimal_places=3)
    memory_gib = models.DecimalField(max_digits=14, decimal_places=3)
    gpu_hours = models.DecimalField(max_digits=16, decimal_places=4)
    core_hours = models.DecimalField(max_digits=16, decimal_places=4)
    memory_gib_hours = models.DecimalField(max_digits=18, decimal_places=4)
    active_gpu_hours = models.DecimalField(
        max_digits=16, decimal_places=4, null=True, blank=True
    )
    gap_gpu_hours = models.DecimalField(
        max_digits=16, decimal_places=4, default=Decimal(0),
        help_text="Reserved GPU-hours of the minutes without telemetry.",
    )
    gpu_memory_gib_hours = models.DecimalField(
        max_digits=18, decimal_places=4, null=True, blank=True
    )
    expected_minutes = models.PositiveIntegerField(default=0)
    telemetry_minutes = models.PositiveIntegerField(default=0)
    gap_minutes = models.PositiveIntegerField(default=0)
    telemetry_source = models.CharField(max_length=40, blank=True)
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["hour", "admission_id", "phase"]
        constraints = [
            models.UniqueConstraint(
                fields=["admission_id", "hour", "phase"], name="usage_unique_admission_hour"
            ),
        ]

    def __str__(self) -> str:
        return f"w{self.workload_id} {self.hour:%Y-%m-%d %H:00} {self.phase}"

    @property
    def efficiency(self) -> Decimal | None:
        """Active / metered reserved GPU-hours (None when nothing was metered)."""
        metered = self.gpu_hours - self.gap_gpu_hours
        if self.active_gpu_hours is None or metered <= 0:
            return None
        return (self.active_gpu_hours / metered).quantize(QUANTITY_PLACES)


class OrphanTelemetry(models.Model):
    """Telemetry for an Allot pod during minutes when its workload held no admission."""

    hour = models.DateTimeField(db_index=True)
    workload_id = models.BigIntegerField()
    namespace = models.CharField(max_length=63, blank=True)
    minutes = models.PositiveIntegerField()
    active_gpu_hours = models.DecimalField(max_digits=16, decimal_places=4)

    class Meta:
        ordering = ["hour", "workload_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "workload_id", "namespace"], name="orphan_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"orphan w{self.workload_id} {self.hour:%Y-%m-%d %H:00}"
