"""Billing: rate cards, cost centers, hourly usage records, the chained ledger, invoices, budgets.

Rounding (stated once, applied everywhere): quantities to 4 decimal places, money to cents,
both ROUND_HALF_EVEN; an amount is `round(round4(quantity) * rate, 2)`.

Records that finance relies on (usage records, ledger entries, invoice lines) keep plain ids and
names of workloads, queues and flavors rather than foreign keys: deleting a workload or renaming
a queue must never rewrite or cascade into what was billed.
"""

from decimal import ROUND_HALF_EVEN, Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.history import SourcedHistoricalRecords

QUANTITY_PLACES = Decimal("0.0001")
MONEY_PLACES = Decimal("0.01")


def round_quantity(value: Decimal) -> Decimal:
    """A quantity rounded to 4 places, half-even."""
    return Decimal(value).quantize(QUANTITY_PLACES, rounding=ROUND_HALF_EVEN)


def round_money(value: Decimal) -> Decimal:
    """An amount rounded to cents, half-even."""
    return Decimal(value).quantize(MONEY_PLACES, rounding=ROUND_HALF_EVEN)


class ChargeBasis(models.TextChoices):
    ALLOCATION = "allocation", "Allocation (reserved GPU-hours)"
    USAGE = "usage", "Usage (active GPU-hours)"
    HYBRID = "hybrid", "Hybrid (a share of each)"


class BillableResource(models.TextChoices):
    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU core"
    MEMORY = "memory", "Memory GiB"


UNITS = {
    BillableResource.GPU: "GPU-hour",
    BillableResource.CPU: "core-hour",
    BillableResource.MEMORY: "GiB-hour",
}


class CostCenter(models.Model):
    """Who pays: teams belong to one; budgets and invoices belong to it."""

    code = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    charge_basis = models.CharField(
        max_length=16, choices=ChargeBasis.choices, default=ChargeBasis.ALLOCATION
    )
    usage_share = models.DecimalField(
        max_digits=3, decimal_places=2, default=Decimal("0.50"),
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="Hybrid basis: the share billed on active GPU-hours (the rest on reserved).",
    )
    currency = models.CharField(max_length=3, default="EUR")
    contact_email = models.EmailField(blank=True)
    is_default = models.BooleanField(
        default=False, help_text="Charged for teams that have no cost center of their own."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True),
                name="costcenter_one_default",
            ),
        ]

    def __str__(self) -> str:
        return self.code


class TeamCostCenter(models.Model):
    """The one cost center a team belongs to."""

    team = models.OneToOneField(
        "quotas.Team", on_delete=models.CASCADE, related_name="cost_center_link"
    )
    cost_center = models.ForeignKey(CostCenter, on_delete=models.PROTECT, related_name="teams")

    def __str__(self) -> str:
        return f"{self.team} -> {self.cost_center}"


class RateCard(models.Model):
    """One version of the price of a resource on a flavor, effective from a moment on.

    A version is never edited once it may have been used: a change is a new version with a
    later `effective_from`, so past charges keep the rate they were priced at.
    """

    flavor = models.ForeignKey("quotas.Flavor", on_delete=models.PROTECT, related_name="rates")
    resource = models.CharField(max_length=16, choices=BillableResource.choices)
    version = models.PositiveIntegerField()
    effective_from = models.DateTimeField()
    rate = models.DecimalField(
        max_digits=12, decimal_places=4, validators=[MinValueValidator(0)],
        help_text="Price of one unit (GPU-hour, core-hour, GiB-hour).",
    )
    frozen_rate = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True,
        validators=[MinValueValidator(0)],
        help_text="Price of one unit held frozen (reserved, pods not running); empty = rate.",
    )
    unit = models.CharField(max_length=16)
    currency = models.CharField(max_length=3, default="EUR")
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    history = SourcedHistoricalRecords()

    class Meta:
        ordering = ["flavor__name", "resource", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["flavor", "resource", "version"], name="rate_unique_version"
            ),
            models.UniqueConstraint(
                fields=["flavor", "resource", "effective_from"], name="rate_unique_effective"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor} {self.resource} v{self.version}: {self.rate} {self.currency}"

    @property
    def effective_frozen_rate(self) -> Decimal:
        return self.rate if self.frozen_rate is None else self.frozen_rate


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
    gpus = models.PositiveIntegerField()
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


class InvoiceState(models.TextChoices):
    ISSUED = "issued", "Issued"
    VOID = "void", "Void"


class Invoice(models.Model):
    """A month's charges of one cost center, frozen from the ledger when issued."""

    cost_center = models.ForeignKey(CostCenter, on_delete=models.PROTECT, related_name="invoices")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    number = models.CharField(max_length=40, unique=True)
    state = models.CharField(
        max_length=8, choices=InvoiceState.choices, default=InvoiceState.ISSUED
    )
    currency = models.CharField(max_length=3)
    total = models.DecimalField(max_digits=16, decimal_places=2)
    ledger_seq_max = models.BigIntegerField(
        help_text="The last ledger entry considered; later entries go to a later invoice."
    )
    entry_count = models.PositiveIntegerField(default=0)
    issued_at = models.DateTimeField()
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["-period_start", "cost_center__code"]
        constraints = [
            models.UniqueConstraint(
                fields=["cost_center", "period_start"], name="invoice_unique_period"
            ),
        ]

    def __str__(self) -> str:
        return self.number


class InvoiceLine(models.Model):
    """Charges of one team, queue, flavor and kind on an invoice."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    adjusts = models.CharField(
        max_length=7, blank=True,
        help_text="YYYY-MM of an earlier invoiced month this line corrects (posted after it "
        "was issued); empty for the invoice's own month.",
    )
    team_name = models.CharField(max_length=63, blank=True)
    queue = models.CharField(max_length=512)
    flavor = models.CharField(max_length=63)
    kind = models.CharField(max_length=16, choices=ChargeKind.choices)
    unit = models.CharField(max_length=16)
    quantity = models.DecimalField(max_digits=18, decimal_places=4)
    amount = models.DecimalField(max_digits=16, decimal_places=2)

    class Meta:
        ordering = ["adjusts", "team_name", "queue", "flavor", "kind"]

    def __str__(self) -> str:
        return f"{self.invoice} {self.team_name} {self.queue} {self.flavor} {self.kind}"


class InvoiceWorkloadLine(models.Model):
    """The appendix: what each workload cost on an invoice."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="workload_lines")
    workload_id = models.BigIntegerField(null=True, blank=True)
    workload_name = models.CharField(max_length=63, blank=True)
    team_name = models.CharField(max_length=63, blank=True)
    queue = models.CharField(max_length=512)
    gpu_hours = models.DecimalField(max_digits=18, decimal_places=4)
    frozen_gpu_hours = models.DecimalField(max_digits=18, decimal_places=4)
    amount = models.DecimalField(max_digits=16, decimal_places=2)

    class Meta:
        ordering = ["team_name", "queue", "workload_id"]

    def __str__(self) -> str:
        return f"{self.invoice} w{self.workload_id}"


class BudgetPeriod(models.TextChoices):
    WEEKLY = "weekly", "Weekly"
    MONTHLY = "monthly", "Monthly"


class BudgetAction(models.TextChoices):
    NOTIFY = "notify", "Notify (email and portal banner)"
    BLOCK = "block", "Block new submissions"
    LOWER_PRIORITY = "lower", "Lower new workloads to batch-low"


class Budget(models.Model):
    """An amount a cost center may spend per week or month."""

    cost_center = models.ForeignKey(CostCenter, on_delete=models.CASCADE, related_name="budgets")
    period = models.CharField(
        max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTHLY
    )
    amount = models.DecimalField(max_digits=16, decimal_places=2, validators=[MinValueValidator(0)])
    currency = models.CharField(max_length=3, default="EUR")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    history = SourcedHistoricalRecords()

    class Meta:
        ordering = ["cost_center__code", "period"]
        constraints = [
            models.UniqueConstraint(fields=["cost_center", "period"], name="budget_unique_period"),
        ]

    def __str__(self) -> str:
        return f"{self.cost_center} {self.period} {self.amount} {self.currency}"


class BudgetThreshold(models.Model):
    """A percentage of a budget and what happens when spending reaches it."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="thresholds")
    percent = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    action = models.CharField(max_length=8, choices=BudgetAction.choices)

    history = SourcedHistoricalRecords()

    class Meta:
        ordering = ["budget", "percent", "action"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "percent", "action"], name="threshold_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} {self.percent}% {self.action}"


class BudgetFiring(models.Model):
    """A threshold reached in one budget period: the event row, written once per period."""

    threshold = models.ForeignKey(
        BudgetThreshold, on_delete=models.CASCADE, related_name="firings"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    spent = models.DecimalField(max_digits=16, decimal_places=2)
    budget_amount = models.DecimalField(max_digits=16, decimal_places=2)
    message = models.TextField()
    fired_at = models.DateTimeField()
    notified = models.PositiveIntegerField(default=0, help_text="Emails sent.")

    class Meta:
        ordering = ["-fired_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["threshold", "period_start"], name="firing_once_per_period"
            ),
        ]

    def __str__(self) -> str:
        return self.message


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
