"""What a simulated cluster holds: its Jobs (pods computed from the clock), controls, events.

Nothing here runs in the background: a SimJob stores when it was started and how fast its
cluster's clock runs, and its pods' states are computed from the wall clock when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import models


class SimControl(models.Model):
    """Runtime switches of one simulated cluster (set by `manage.py sim_cluster`)."""

    cluster = models.OneToOneField(
        "scheduling.Cluster", on_delete=models.CASCADE, related_name="sim_control"
    )
    refuse = models.BooleanField(default=False, help_text="Refuse every dispatch.")
    refuse_next = models.PositiveIntegerField(default=0, help_text="Refuse the next N dispatches.")
    fail_next = models.PositiveIntegerField(
        default=0, help_text="The next N workloads created fail while running."
    )
    priority_classes = models.JSONField(
        default=dict, blank=True, help_text="Synced PriorityClasses: name -> {value, ...}."
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"controls of {self.cluster}"


class SimJob(models.Model):
    """One Job (one pod set of a workload) on a simulated cluster."""

    cluster = models.ForeignKey(
        "scheduling.Cluster", on_delete=models.CASCADE, related_name="sim_jobs"
    )
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=63)
    workload_id = models.BigIntegerField()
    pod_set_index = models.PositiveIntegerField(default=0)
    flavor = models.CharField(max_length=63)
    pods = models.PositiveIntegerField()
    # Whole cards, or a fraction of one card (then `cards` holds each pod's card on its node).
    gpus_per_pod = models.DecimalField(max_digits=9, decimal_places=3, default=Decimal(0))
    cards = models.JSONField(default=list, blank=True)
    cpu_per_pod = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    memory_gib_per_pod = models.DecimalField(max_digits=12, decimal_places=3, default=Decimal(0))
    nodes = models.JSONField(default=list, help_text="Node of each pod (pod k on nodes[k]).")
    priority_class = models.CharField(max_length=253, blank=True)
    termination_grace_s = models.PositiveIntegerField(default=30)
    labels = models.JSONField(default=dict, blank=True)
    # Simulated seconds of running until the pods succeed; None: until deleted.
    duration_s = models.FloatField(null=True, blank=True)
    speedup = models.FloatField(default=1.0, help_text="Simulated seconds per wall second.")
    start_delay_s = models.FloatField(default=0.0, help_text="Simulated seconds pods pend.")
    fail_after_s = models.FloatField(
        null=True, blank=True, help_text="Simulated seconds of running until a pod fails."
    )
    suspended = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    suspended_at = models.DateTimeField(null=True, blank=True)
    # What a watch reads (see SimulatedBackend.watch_workloads): the last write to the Job, and
    # the wall-clock moments its pods start running and end (succeed or fail); None when the
    # Job is suspended or the moment does not come.
    touched_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster_id", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="simjob_unique_name"
            ),
        ]
        indexes = [
            models.Index(fields=["cluster", "workload_id"]),
            models.Index(fields=["cluster", "touched_at"], name="simjob_cluster_touched"),
            models.Index(fields=["cluster", "ready_at"], name="simjob_cluster_ready"),
            models.Index(fields=["cluster", "done_at"], name="simjob_cluster_done"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.namespace}/{self.name}"

    def mark(self, now: datetime) -> None:
        """Set `touched_at` to `now` and the moments the pods change state (from the start
        time, the delay, the duration and the failure point, at the cluster's speed)."""
        self.touched_at = now
        if self.suspended or self.started_at is None:
            self.ready_at = self.done_at = None
            return
        speed = self.speedup or 1.0
        self.ready_at = self.started_at + timedelta(seconds=self.start_delay_s / speed)
        ends = [v for v in (self.duration_s, self.fail_after_s) if v is not None]
        self.done_at = (self.started_at
                        + timedelta(seconds=(self.start_delay_s + min(ends)) / speed)
                        if ends else None)

    def pods_at(self, now: datetime, *, ignore_suspend: bool = False) -> SimPods:
        """The pods' states at `now`, from the start time and the cluster's clock speed
        (`ignore_suspend`: as if still running, to see what a suspension interrupted)."""
        if self.started_at is None or (self.suspended and not ignore_suspend):
            return SimPods(suspended=True)
        elapsed = max(0.0, (now - self.started_at).total_seconds()) * self.speedup
        if elapsed < self.start_delay_s:
            return SimPods(pending=self.pods)
        ran = elapsed - self.start_delay_s
        if self.fail_after_s is not None and ran >= self.fail_after_s:
            return SimPods(
                running=0, failed=1, job_failed=True,
                message="BackoffLimitExceeded: Job has reached the specified backoff limit "
                f"(pod {self.name}-0 failed after {self.fail_after_s:g} s; simulated failure)",
            )
        if self.duration_s is not None and ran >= self.duration_s:
            return SimPods(succeeded=self.pods)
        return SimPods(running=self.pods)


@dataclass(frozen=True)
class SimPods:
    """Pods of a SimJob by state at one instant."""

    suspended: bool = False
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    job_failed: bool = False
    message: str = ""


class SimEvent(models.Model):
    """A Kubernetes-style Event posted about a simulated Job (what `kubectl describe` shows)."""

    cluster = models.ForeignKey(
        "scheduling.Cluster", on_delete=models.CASCADE, related_name="sim_events"
    )
    namespace = models.CharField(max_length=63)
    job_name = models.CharField(max_length=63)
    type = models.CharField(max_length=16)
    reason = models.CharField(max_length=128)
    note = models.CharField(max_length=1024)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "pk"]
        indexes = [models.Index(fields=["cluster", "namespace", "job_name"])]

    def __str__(self) -> str:
        return f"{self.job_name} {self.type} {self.reason}"
