"""Who pays: cost centers, the basis they are charged on, and which team belongs to which."""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class ChargeBasis(models.TextChoices):
    ALLOCATION = "allocation", "Allocation (reserved GPU-hours)"
    USAGE = "usage", "Usage (active GPU-hours)"
    HYBRID = "hybrid", "Hybrid (a share of each)"


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
