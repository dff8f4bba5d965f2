"""Budgets: what a cost center may spend per period, its thresholds and when they fired."""

from django.core.validators import MinValueValidator
from django.db import models

from billing.models.cost_centers import CostCenter
from core.history import SourcedHistoricalRecords


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
