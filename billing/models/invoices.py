"""Invoices: a month's charges of a cost center, their lines and the per-workload appendix."""

from django.conf import settings
from django.db import models

from billing.models.cost_centers import CostCenter
from billing.models.ledger import ChargeKind


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
    resource = models.CharField(
        max_length=253, blank=True,
        help_text="The rate card's resource the line was priced at (gpu, gpu-fraction, a MIG "
        "profile, ...).",
    )
    unit = models.CharField(max_length=16)
    quantity = models.DecimalField(max_digits=18, decimal_places=4)
    amount = models.DecimalField(max_digits=16, decimal_places=2)

    class Meta:
        ordering = ["adjusts", "team_name", "queue", "flavor", "kind", "resource"]

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
