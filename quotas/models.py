"""The quota tree: flavors, queues, quota entries (min/max/lendable per key) and teams."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from core.history import SourcedHistoricalRecords
from core.labels import label_key_problem, labels_problems


class Resource(models.TextChoices):
    GPU = "gpu", "GPU (whole cards)"
    CPU = "cpu", "CPU (cores)"
    MEMORY = "memory", "Memory (GiB)"


class Strategy(models.TextChoices):
    BINPACK = "binpack", "binpack (fill one cluster first)"
    SPREAD = "spread", "spread (spread across clusters)"


class Flavor(models.Model):
    """A class of node, named after its accelerator (`a100-80g`, `cpu`)."""

    name = models.SlugField(max_length=63, unique=True)
    node_selector = models.JSONField(
        default=dict, blank=True, help_text="Node labels that select this flavor's nodes."
    )
    gpu_memory_gib = models.PositiveIntegerField(
        null=True, blank=True, help_text="GPU memory per card in GiB; empty for CPU-only nodes."
    )
    interconnect_label = models.CharField(
        max_length=253, blank=True, help_text="Node label naming the interconnect domain (rack)."
    )
    mig_profiles = models.JSONField(default=list, blank=True)
    notes = models.TextField(blank=True)

    history = SourcedHistoricalRecords()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # Kubernetes selects the flavor's nodes with these labels: they must be valid ones.
        errors: dict[str, list[str]] = {}
        problems = labels_problems(self.node_selector if self.node_selector is not None else {})
        if problems:
            errors["node_selector"] = problems
        problem = label_key_problem(self.interconnect_label) if self.interconnect_label else None
        if problem:
            errors["interconnect_label"] = [problem]
        if errors:
            raise ValidationError(errors)


class Queue(models.Model):
    """A node of the quota tree; workloads are submitted to leaves only."""

    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    name = models.SlugField(max_length=63)
    path = models.CharField(max_length=512, unique=True, editable=False)
    depth = models.PositiveSmallIntegerField(default=1, editable=False)
    strategy = models.CharField(
        max_length=16, choices=Strategy.choices, blank=True,
        help_text="Default placement strategy; empty inherits the parent's or the setting.",
    )
    namespace = models.CharField(
        max_length=63, blank=True, help_text="Kubernetes namespace a leaf maps to."
    )
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # updated_at moves on every save (the engine's snapshot reads it): not a change to keep.
    history = SourcedHistoricalRecords(excluded_fields=["updated_at"])

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["parent", "name"], name="queue_unique_name_in_parent"),
        ]

    def __str__(self) -> str:
        return self.path

    def compute_path(self) -> tuple[str, int]:
        """The path and depth this queue should have given its parent."""
        if self.parent is None:
            return self.name, 1
        return f"{self.parent.path}/{self.name}", self.parent.depth + 1

    def save(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.path, self.depth = self.compute_path()
        super().save(*args, **kwargs)

    @property
    def is_leaf(self) -> bool:
        return not self.children.exists()


class QuotaEntry(models.Model):
    """min (guaranteed), max (ceiling), lendable (part of min lent while idle) for one key."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quotas")
    resource = models.CharField(max_length=16, choices=Resource.choices, default=Resource.GPU)
    min = models.DecimalField(
        max_digits=14, decimal_places=3, default=Decimal(0), validators=[MinValueValidator(0)]
    )
    max = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        validators=[MinValueValidator(0)], help_text="Empty: the parent's max (or unlimited).",
    )
    lendable = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        validators=[MinValueValidator(0)], help_text="Empty: all of min may be lent.",
    )

    history = SourcedHistoricalRecords()

    class Meta:
        ordering = ["queue__path", "flavor__name", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "flavor", "resource"], name="quota_unique_key"
            ),
        ]
        verbose_name_plural = "quota entries"

    def __str__(self) -> str:
        return f"{self.queue.path} {self.flavor.name}/{self.resource}"

    @property
    def key(self) -> str:
        return f"{self.flavor.name}/{self.resource}"


class TeamRole(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    LEAD = "lead", "Lead"


class Team(models.Model):
    """A team of users and the leaf queues they may submit to."""

    name = models.SlugField(max_length=63, unique=True)
    display_name = models.CharField(max_length=200, blank=True)
    department = models.ForeignKey(
        Queue, null=True, blank=True, on_delete=models.SET_NULL, related_name="department_teams",
        help_text="The department queue this team belongs to (its leads decide within it).",
    )
    queues = models.ManyToManyField(Queue, blank=True, related_name="teams")
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="TeamMembership", related_name="teams"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    """A user's role in a team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    role = models.CharField(max_length=16, choices=TeamRole.choices, default=TeamRole.RESEARCHER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"
