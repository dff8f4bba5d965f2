"""Capacity requests: a time-boxed change of a queue's min and/or max, approved by a person."""

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from quotas.models import RESOURCE_NAME_LENGTH, Resource


class CapacityRequestState(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    APPROVED = "approved", "Approved (starts later)"
    ACTIVE = "active", "Active (applied to the tree)"
    DENIED = "denied", "Denied"
    CANCELLED = "cancelled", "Cancelled"
    REVERTED = "reverted", "Reverted (period ended)"


class CapacityRequest(models.Model):
    """A request to set a queue's min and/or max for one key over a period."""

    queue = models.ForeignKey(
        "quotas.Queue", on_delete=models.CASCADE, related_name="capacity_requests"
    )
    flavor = models.ForeignKey(
        "quotas.Flavor", on_delete=models.PROTECT, related_name="capacity_requests"
    )
    resource = models.CharField(
        max_length=RESOURCE_NAME_LENGTH, default=Resource.GPU,
        help_text="gpu, cpu, memory, or an extended resource (nvidia.com/mig-1g.10gb).",
    )
    min = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        validators=[MinValueValidator(0)], help_text="New min; empty: unchanged.",
    )
    max = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        validators=[MinValueValidator(0)], help_text="New max; empty: unchanged.",
    )
    justification = models.TextField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(
        null=True, blank=True, help_text="When the change is reverted; empty: permanent."
    )
    state = models.CharField(
        max_length=16, choices=CapacityRequestState.choices,
        default=CapacityRequestState.SUBMITTED, db_index=True,
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="capacity_requests"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="capacity_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    # The entry as it was before the change was applied, so a revert restores it exactly
    # (None values mean "not set", i.e. the default applied, or no entry existed).
    previous = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "ends_at"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(min__isnull=False) | models.Q(max__isnull=False),
                name="capacity_request_changes_something",
            ),
            models.CheckConstraint(
                condition=models.Q(ends_at__isnull=True)
                | models.Q(ends_at__gt=models.F("starts_at")),
                name="capacity_request_period_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.queue.path} {self.flavor.name}/{self.resource}"

    @property
    def key(self) -> str:
        return f"{self.flavor.name}/{self.resource}"

    @property
    def is_open(self) -> bool:
        return self.state == CapacityRequestState.SUBMITTED


def decimal_or_none(value: object) -> Decimal | None:
    """A JSON-stored number back as Decimal (None stays None)."""
    return None if value is None else Decimal(str(value))


class CapacityRequestEvent(models.Model):
    """One thing that happened to a capacity request: submitted, comment, approved, reverted..."""

    request = models.ForeignKey(CapacityRequest, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    type = models.CharField(max_length=32)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    message = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.request_id} {self.type} at {self.at:%Y-%m-%d %H:%M}"
