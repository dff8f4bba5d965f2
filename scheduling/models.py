"""Clusters and their nodes, so the fleet's installed capacity is known."""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class ClusterKind(models.TextChoices):
    ON_PREMISES = "on-prem", "On-premises"
    CLOUD = "cloud", "Cloud"


class BackendKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated"
    KUBERNETES = "kubernetes", "Kubernetes"


class Cluster(models.Model):
    """A Kubernetes GPU cluster (or a simulated one) that runs admitted workloads."""

    name = models.SlugField(max_length=63, unique=True)
    region = models.CharField(max_length=63, blank=True)
    kind = models.CharField(
        max_length=16, choices=ClusterKind.choices, default=ClusterKind.ON_PREMISES
    )
    backend = models.CharField(
        max_length=16, choices=BackendKind.choices, default=BackendKind.SIMULATED
    )
    connection = models.JSONField(
        default=dict, blank=True,
        help_text='How to reach it: {"kubeconfig": "...", "context": "..."} or '
        '{"in_cluster": true} for Kubernetes; {"speedup": 60} for simulated.',
    )
    health = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    price = models.DecimalField(
        max_digits=8, decimal_places=3, default=Decimal("1.000"),
        validators=[MinValueValidator(0)], help_text="Relative price (cost term of the score).",
    )
    datasets = models.JSONField(default=list, blank=True, help_text="Datasets cached here.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A node of a cluster: its flavor and allocatable resources."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    flavor = models.ForeignKey(
        "quotas.Flavor", on_delete=models.PROTECT, related_name="nodes"
    )
    gpus = models.PositiveIntegerField(default=0)
    cpu = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    memory_gib = models.DecimalField(max_digits=12, decimal_places=3, default=Decimal(0))
    rack = models.CharField(max_length=63, blank=True)
    ready = models.BooleanField(default=True)
    labels = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_in_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"
