"""The quota tree: flavors, queues, quota entries (min/max/lendable per key) and teams."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from core.history import SourcedHistoricalRecords
from core.labels import label_key_problem, labels_problems
from core.quantity import amount_to_base, base_to_amount, nearest_base, resource_name_problem


class Resource(models.TextChoices):
    """The built-in resources; a quota key may also name any extended resource the flavor's
    nodes advertise (`nvidia.com/mig-1g.10gb`, `example.com/foo`)."""

    GPU = "gpu", "GPU (whole cards)"
    CPU = "cpu", "CPU (cores)"
    MEMORY = "memory", "Memory (GiB)"


RESOURCE_NAME_LENGTH = 253
MAX_GPU_EQUIVALENT = 64  # cards one unit of an extended resource may be worth


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
    gpu_equivalents = models.JSONField(
        default=dict, blank=True,
        help_text="What one unit of an extended resource is worth in cards, e.g. "
        '{"nvidia.com/mig-3g.40gb": 0.5}; `mig-Ng.*` defaults to N/7.',
    )
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
        problems = _equivalents_problems(self.gpu_equivalents)
        if problems:
            errors["gpu_equivalents"] = problems
        if errors:
            raise ValidationError(errors)


def _equivalents_problems(value: object) -> list[str]:
    """What is wrong with a flavor's `gpu_equivalents` (resource name -> cards per unit)."""
    if not isinstance(value, dict):
        return ["must be an object of resource names and numbers of cards"]
    out = []
    for name, cards in value.items():
        problem = resource_name_problem(name)
        if problem:
            out.append(problem)
        elif isinstance(cards, bool) or not isinstance(cards, int | float) or not (
                0 <= cards <= MAX_GPU_EQUIVALENT):
            out.append(f"{name}: {cards!r} is not a number of cards from 0 to "
                       f"{MAX_GPU_EQUIVALENT}")
    return out


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
    # Interactive sessions (notebooks) are stopped after this long with their GPUs below the
    # threshold (scheduling/sessions.py); empty inherits the parent's, none anywhere: never.
    idle_timeout_s = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Stop interactive sessions idle this long (seconds); empty: the parent's.")
    idle_gpu_util_pct = models.PositiveSmallIntegerField(
        null=True, blank=True,
        help_text="A session is idle while its GPUs' utilisation stays below this percent; "
                  "empty: the parent's, else 5.")
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
    """min (guaranteed), max (ceiling), lendable (part of min lent while idle) for one key.

    `min_base`, `max_base` and `lendable_base` hold the exact amounts, as integers of the
    resource's base unit (bytes for memory-like resources, thousandths otherwise:
    `core.quantity`); `min`, `max` and `lendable` are the same in Allot's unit (GiB, cores,
    cards, a count) rounded to 3 places, for reading. `save` keeps them together: a changed
    rounded value sets the exact one.
    """

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quotas")
    resource = models.CharField(
        max_length=RESOURCE_NAME_LENGTH, default=Resource.GPU,
        help_text="gpu, cpu, memory, or an extended resource (nvidia.com/mig-1g.10gb).",
    )
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
    min_base = models.BigIntegerField(default=0, editable=False)
    max_base = models.BigIntegerField(null=True, blank=True, editable=False)
    lendable_base = models.BigIntegerField(null=True, blank=True, editable=False)

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

    def set_exact(self, name: str, amount: Decimal | None) -> None:
        """Set `min`, `max` or `lendable` to an exact amount (Allot's unit)."""
        base = None if amount is None else amount_to_base(self.resource, amount)
        setattr(self, f"{name}_base", base)
        setattr(self, name, None if base is None else _rounded(self.resource, base))

    def sync_exact(self) -> None:
        """Bring the exact columns in line with the rounded ones where those were changed."""
        for name in ("min", "max", "lendable"):
            shown = getattr(self, name)
            base = getattr(self, f"{name}_base")
            if shown is None:
                setattr(self, f"{name}_base", None)
                continue
            if base is not None and _rounded(self.resource, base) == Decimal(shown):
                continue
            base = nearest_base(self.resource, Decimal(shown))
            setattr(self, f"{name}_base", base)
            setattr(self, name, _rounded(self.resource, base))

    def save(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.sync_exact()
        super().save(*args, **kwargs)


def _rounded(resource: str, base: int) -> Decimal:
    return base_to_amount(resource, base).quantize(Decimal("0.001"))


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
