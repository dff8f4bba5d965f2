"""Policies as code: CEL rules with modes, scopes, versions, violations and team approvals."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.history import SourcedHistoricalRecords

from .rules import ORDER_MAX, ORDER_MIN


class PolicyKind(models.TextChoices):
    VALIDATE = "validate", "validate (deny a request whose rule is false)"
    LIMIT = "limit", "limit (cap a queue's max for a key)"
    PLACEMENT = "placement", "placement (clusters or regions a workload may use)"
    PRIORITY = "priority", "priority (the priority class of a request)"


class PolicyMode(models.TextChoices):
    ENFORCE = "enforce", "enforce"
    AUDIT = "audit", "audit (record, allow)"
    OFF = "off", "off"


# Kinds that run at submission; the others run in every scheduling cycle.
SUBMISSION_KINDS = (PolicyKind.VALIDATE, PolicyKind.PRIORITY)
CYCLE_KINDS = (PolicyKind.LIMIT, PolicyKind.PLACEMENT)


class Policy(models.Model):
    """One rule in CEL: which requests it applies to (`match`), the rule and its message."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=PolicyKind.choices)
    match = models.TextField(
        default="true", help_text="CEL bool: the requests (or queues, for limits) it applies to."
    )
    rule = models.TextField(help_text="CEL: bool (validate), number (limit), list of cluster or "
                            "region names (placement), priority class name (priority).")
    message = models.TextField(
        blank=True, help_text="CEL string expression shown on a denial; name the numbers."
    )
    key = models.CharField(
        max_length=100, blank=True, help_text='limit only: the quota key it caps, "a100-80g/gpu".'
    )
    mode = models.CharField(max_length=16, choices=PolicyMode.choices, default=PolicyMode.AUDIT)
    scope = models.JSONField(
        default=list, blank=True, help_text="Queue subtrees (paths) it applies to; empty = all."
    )
    order = models.IntegerField(
        default=100, validators=[MinValueValidator(ORDER_MIN), MaxValueValidator(ORDER_MAX)],
        help_text=f"Evaluation order (lower first, {ORDER_MIN} to {ORDER_MAX}); the first "
        "priority policy wins.",
    )
    version = models.PositiveIntegerField(default=1, editable=False)
    hits = models.PositiveBigIntegerField(default=0, editable=False)
    denials = models.PositiveBigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )

    # Counters move with every evaluation (by UPDATE): not part of a policy's history.
    history = SourcedHistoricalRecords(excluded_fields=["hits", "denials", "updated_at"])

    class Meta:
        ordering = ["order", "name"]
        verbose_name_plural = "policies"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(order__gte=ORDER_MIN, order__lte=ORDER_MAX),
                name="policy_order_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class PolicyVersion(models.Model):
    """One saved state of a policy: who changed it, when, the full content and the diff."""

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    at = models.DateTimeField()
    content = models.JSONField(default=dict)
    diff = models.TextField(blank=True)
    comment = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["policy_id", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "version"], name="policy_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.policy.name} v{self.version}"


class ViolationOutcome(models.TextChoices):
    DENIED = "denied", "denied"
    AUDITED = "audited", "audited (allowed)"
    GRANDFATHERED = "grandfathered", "grandfathered (update that does not grow)"
    ERROR = "error", "evaluation error"
    CAPPED = "capped", "max capped"
    PLACED = "placed", "clusters restricted"
    PRIORITIZED = "prioritized", "priority class set"


class PolicyViolation(models.Model):
    """A policy decision worth keeping: a denial, an audit-mode violation, an error, an effect."""

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="violations")
    policy_version = models.PositiveIntegerField()
    mode = models.CharField(max_length=16, choices=PolicyMode.choices)
    outcome = models.CharField(max_length=16, choices=ViolationOutcome.choices)
    code = models.CharField(max_length=40, blank=True)
    at = models.DateTimeField()
    subject = models.CharField(
        max_length=300, blank=True, help_text="The workload name or queue path it was about."
    )
    queue_path = models.CharField(max_length=512, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    workload_id = models.BigIntegerField(null=True, blank=True)
    expression = models.TextField(blank=True, help_text="The expression that was evaluated.")
    message = models.TextField(blank=True)
    input = models.JSONField(default=dict, blank=True, help_text="The context it was given.")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["policy", "at"], name="violation_policy_at"),
            models.Index(fields=["at"], name="violation_at"),
        ]

    def __str__(self) -> str:
        return f"{self.policy.name} {self.outcome} {self.subject}"


class TeamApproval(models.Model):
    """An approval a team holds (`h100`, `export-control`), visible to rules as team.approvals."""

    team = models.ForeignKey("quotas.Team", on_delete=models.CASCADE, related_name="approvals")
    name = models.SlugField(max_length=63)
    note = models.CharField(max_length=300, blank=True)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    granted_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="team_approval_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.team.name}: {self.name}"


class SessionPolicy(models.Model):
    """Interactive sessions' limits (idle culling, the longest time limit) for some queues and
    users; the most specific policy that sets a value wins (policies/sessions.py)."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    queues = models.JSONField(
        default=list, blank=True, help_text='Queue subtrees (paths, ["rd/vision"]) it applies '
        "to; empty: every queue.")
    users = models.JSONField(
        default=list, blank=True, help_text='User names (["alice"]) it applies to; empty: '
        "every user.")
    idle_timeout_s = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(60)],
        help_text="Stop sessions idle this long (seconds); empty: no opinion.")
    idle_gpu_util_pct = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="A session is idle while its GPUs stay below this percent; empty: no opinion.")
    max_time_s = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(300)],
        help_text="The longest time limit a session may have, extensions included (seconds); "
        "empty: no opinion.")
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "session policies"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Lists of names, and at least one setting."""
        from django.core.exceptions import ValidationError

        errors = {}
        for field in ("queues", "users"):
            value = getattr(self, field)
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                errors[field] = [f"{value!r} is not a list of names"]
        if self.idle_timeout_s is None and self.idle_gpu_util_pct is None and (
                self.max_time_s is None):
            errors["idle_timeout_s"] = ["set at least one of idle_timeout_s, idle_gpu_util_pct, "
                                        "max_time_s"]
        if errors:
            raise ValidationError(errors)
