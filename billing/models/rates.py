"""Prices: the billable resources, their units, and the versioned rate cards per flavor."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from core.history import SourcedHistoricalRecords


class BillableResource(models.TextChoices):
    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU core"
    MEMORY = "memory", "Memory GiB"
    # Fractions of a card (pods asking less than one card): priced per GPU-hour of the share,
    # in place of the flavor's `gpu` rate.
    GPU_FRACTION = "gpu-fraction", "GPU fraction"


UNITS = {
    BillableResource.GPU: "GPU-hour",
    BillableResource.CPU: "core-hour",
    BillableResource.MEMORY: "GiB-hour",
    BillableResource.GPU_FRACTION: "GPU-hour",
}
# A rate for one MIG profile (an extended resource with a GPU-equivalent on the flavor, e.g.
# `nvidia.com/mig-1g.10gb`) is the price of one slice held an hour, in place of its
# GPU-equivalent at the `gpu` rate.
SLICE_UNIT = "slice-hour"


class RateCard(models.Model):
    """One version of the price of a resource on a flavor, effective from a moment on.

    A version is never edited once it may have been used: a change is a new version with a
    later `effective_from`, so past charges keep the rate they were priced at.
    """

    flavor = models.ForeignKey("quotas.Flavor", on_delete=models.PROTECT, related_name="rates")
    resource = models.CharField(
        max_length=253,
        help_text="gpu, cpu, memory, gpu-fraction, or a MIG profile with a GPU-equivalent on "
        "the flavor (e.g. nvidia.com/mig-1g.10gb): its price per slice-hour.",
    )
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
    def resource_label(self) -> str:
        """`GPU`, `CPU core`, ... or the MIG profile's own name."""
        if self.resource in BillableResource.values:
            return str(BillableResource(self.resource).label)
        return self.resource

    @property
    def effective_frozen_rate(self) -> Decimal:
        return self.rate if self.frozen_rate is None else self.frozen_rate
