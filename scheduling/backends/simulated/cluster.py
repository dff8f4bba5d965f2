"""A simulated cluster as the backend sees it: its Cluster row, its Jobs, its clock, and what it
holds besides Jobs (the nodes declared for it, its PriorityClasses)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.backends.base import (
    BackendError,
    FlavorMatch,
    NodeInfo,
    PriorityClassSpec,
    WorkloadRef,
)


class SimulatedCluster:
    """The base of SimulatedBackend: one cluster of the database, read on a clock."""

    def __init__(self, *, name: str, clock: Callable[[], datetime] | None = None,
                 watch_overlap_s: float = 0.0):
        self.name = name
        self.clock = clock or timezone.now
        # A bookmark is a wall-clock time, and a write committed just after a watch read may
        # carry an earlier time than the bookmark it returned. A watcher that must not miss it
        # until its next resync sets an overlap: changes that recent are reported again.
        self.watch_overlap_s = watch_overlap_s

    def _cluster(self) -> Any:
        from scheduling.models import Cluster

        try:
            return Cluster.objects.get(name=self.name)
        except Cluster.DoesNotExist:
            raise BackendError(
                f"simulated cluster {self.name} does not exist in the database", retryable=False
            ) from None

    def _jobs(self, ref: WorkloadRef) -> dict[str, Any]:
        from scheduling.backends.simulated.models import SimJob

        jobs = SimJob.objects.filter(
            cluster__name=self.name, namespace=ref.namespace, name__in=ref.job_names
        )
        return {job.name: job for job in jobs}

    def list_nodes(self, flavors: Sequence[FlavorMatch] | None = None) -> list[NodeInfo]:
        """The cluster's Node rows (a simulated cluster's inventory is what was declared)."""
        from scheduling.models import Node

        nodes = Node.objects.filter(cluster__name=self.name).select_related("flavor")
        return [
            NodeInfo(
                name=node.name, flavor=node.flavor.name, gpus=node.gpus, cpu=node.cpu,
                memory_gib=node.memory_gib, ready=node.ready, rack=node.rack,
                labels=dict(node.labels or {}),
            )
            for node in nodes.order_by("name")
        ]

    def sync_priority_classes(self, classes: Sequence[PriorityClassSpec]) -> None:
        """Remember the classes (as a real cluster would hold them)."""
        from scheduling.backends.simulated.models import SimControl

        with transaction.atomic():
            control, _ = SimControl.objects.select_for_update().get_or_create(
                cluster=self._cluster()
            )
            stored = dict(control.priority_classes or {})
            for pc in classes:
                stored[pc.name] = {
                    "value": pc.value, "description": pc.description,
                    "preemption_policy": pc.preemption_policy,
                }
            if stored != control.priority_classes:
                control.priority_classes = stored
                control.save(update_fields=["priority_classes", "updated_at"])
