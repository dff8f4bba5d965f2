"""The chained ledger: its head (the lock and the tip) and the append-only priced entries."""

from django.db import models

from billing.models.cost_centers import ChargeBasis, CostCenter
from billing.models.rates import RateCard
from billing.models.usage import UsageRecord


class ChargeKind(models.TextChoices):
    GPU_RESERVED = "gpu_reserved", "GPU-hours reserved (running)"
    GPU_ACTIVE = "gpu_active", "GPU-hours active"
    GPU_FROZEN = "gpu_frozen", "GPU-hours frozen"
    CPU = "cpu", "CPU core-hours"
    CPU_FROZEN = "cpu_frozen", "CPU core-hours frozen"
    MEMORY = "memory", "Memory GiB-hours"
    MEMORY_FROZEN = "memory_frozen", "Memory GiB-hours frozen"


class LedgerHead(models.Model):
    """The tip of the chain (one row): locked while appending so entries chain in order."""

    last_seq = models.BigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default="0" * 64)

    def __str__(self) -> str:
        return f"ledger head #{self.last_seq}"


class LedgerEntry(models.Model):
    """One priced charge, append-only, chained by the SHA-256 of the previous entry."""

    seq = models.BigIntegerField(unique=True)
    created_at = models.DateTimeField()
    hour = models.DateTimeField(db_index=True)
    cost_center = models.ForeignKey(CostCenter, on_delete=models.PROTECT, related_name="entries")
    team = models.ForeignKey(
        "quotas.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    team_name = models.CharField(max_length=63, blank=True)
    queue = models.CharField(max_length=512)
    workload_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    workload_name = models.CharField(max_length=63, blank=True)
    flavor = models.CharField(max_length=63)
    kind = models.CharField(max_length=16, choices=ChargeKind.choices)
    basis = models.CharField(max_length=16, choices=ChargeBasis.choices)
    quantity = models.DecimalField(max_digits=18, decimal_places=4)
    unit = models.CharField(max_length=16)
    rate_card = models.ForeignKey(RateCard, on_delete=models.PROTECT, related_name="+")
    rate_version = models.PositiveIntegerField()
    rate = models.DecimalField(max_digits=12, decimal_places=4)
    amount = models.DecimalField(max_digits=16, decimal_places=2)
    currency = models.CharField(max_length=3)
    usage_record = models.ForeignKey(
        UsageRecord, null=True, blank=True, on_delete=models.PROTECT, related_name="entries"
    )
    corrects = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="corrections"
    )
    note = models.CharField(max_length=300, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]
        indexes = [models.Index(fields=["cost_center", "hour"], name="ledger_cc_hour")]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.amount} {self.currency}"

    def save(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if self.pk is not None and not kwargs.pop("_allow_update", False):
            raise ValueError("ledger entries are append-only: post a correction instead")
        super().save(*args, **kwargs)


class LedgerVerification(models.Model):
    """One run of the ledger check (`manage.py billing_verify`, the daily task): whether the
    hash chain and every issued invoice's total held, and the first problem found."""

    ran_at = models.DateTimeField(db_index=True)
    ok = models.BooleanField()
    checked = models.PositiveIntegerField(default=0, help_text="Entries verified.")
    invoices = models.PositiveIntegerField(default=0, help_text="Invoice totals that matched.")
    first_bad_seq = models.BigIntegerField(null=True, blank=True)
    problem = models.TextField(blank=True)
    seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-ran_at"]

    def __str__(self) -> str:
        return f"ledger check {self.ran_at:%Y-%m-%d %H:%M}: {'OK' if self.ok else 'FAILED'}"
