"""Clusters and their nodes, workloads with their pod sets, admissions and events."""

import enum
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.history import SourcedHistoricalRecords


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
    kinds = models.JSONField(
        default=list, blank=True,
        help_text="The workload kinds (apiVersion/Kind) its API serves, as last seen.")
    enabled = models.BooleanField(default=True)
    # Two-phase dispatch: a local refusal lowers the health the engine sees for a while.
    health_penalty = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Subtracted from health until health_penalty_until (after refused dispatches).",
    )
    health_penalty_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    # The dispatch penalty is engine state, set after a refused dispatch: not an edit.
    history = SourcedHistoricalRecords(excluded_fields=["health_penalty", "health_penalty_until"])

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def effective_health(self, now) -> float:  # type: ignore[no-untyped-def]
        """Health as the engine sees it at `now`: lowered while a dispatch penalty lasts."""
        if self.health_penalty_until is not None and self.health_penalty_until > now:
            return max(0.0, self.health - self.health_penalty)
        return self.health


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
    resources = models.JSONField(
        default=dict, blank=True,
        help_text="Allocatable extended resources (nvidia.com/mig-1g.10gb, ...), each as an "
        "integer of its base unit (thousandths; bytes for memory-like ones).",
    )

    history = SourcedHistoricalRecords()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_in_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class PriorityClass(models.Model):
    """A named priority; `can_preempt` classes may preempt lower ones in the same leaf queue."""

    name = models.SlugField(max_length=63, unique=True)
    value = models.IntegerField()
    can_preempt = models.BooleanField(default=False)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return self.name


class WorkloadState(models.TextChoices):
    PENDING = "pending", "Pending"
    RESERVED = "reserved", "Reserved"
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"
    FAILED = "failed", "Failed"


# State groups: every test of "which states" names one of these.
# Placed on a cluster: a reservation until the backend confirms the pods run.
PLACED_STATES = (WorkloadState.RESERVED, WorkloadState.RUNNING)
# Holding capacity: placed, or preempted and inside its grace period.
ACTIVE_STATES = (*PLACED_STATES, WorkloadState.PREEMPTING)
# Not ended: waiting or holding capacity (what a cancel may still stop).
OPEN_STATES = (WorkloadState.PENDING, *ACTIVE_STATES)
OPEN_NAME_CONSTRAINT = "workload_open_name_in_queue"
TERMINAL_STATES = (
    WorkloadState.FINISHED, WorkloadState.CANCELLED, WorkloadState.REJECTED, WorkloadState.FAILED,
)


class Workload(models.Model):
    """A gang of pods submitted to a leaf queue; the engine admits it whole or not at all."""

    name = models.CharField(max_length=63)
    # No index of its own: `workload_queue_state` (queue, state) serves lookups by queue, and a
    # submission's insert maintains one index fewer.
    queue = models.ForeignKey("quotas.Queue", on_delete=models.PROTECT, related_name="workloads",
                              db_index=False)
    team = models.ForeignKey(
        "quotas.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="workloads"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workloads"
    )
    state = models.CharField(
        max_length=16, choices=WorkloadState.choices, default=WorkloadState.PENDING
    )
    priority_class = models.ForeignKey(
        PriorityClass, on_delete=models.PROTECT, related_name="workloads"
    )
    preemptible = models.BooleanField(default=True)
    checkpoint = models.BooleanField(default=True)
    strategy = models.CharField(max_length=16, blank=True, help_text="Empty: the queue's.")
    dataset = models.CharField(max_length=200, blank=True)
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(default=list, blank=True)
    duration_hint_s = models.PositiveIntegerField(null=True, blank=True)
    termination_grace_s = models.PositiveIntegerField(default=30)
    topology = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    kind = models.CharField(
        max_length=120, blank=True,
        help_text="apiVersion/Kind of a workload submitted as a manifest; empty: Allot's Jobs.")
    manifest = models.JSONField(default=dict, blank=True,
                                help_text="The submitted object, created on dispatch.")
    submitted_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    state_changed_at = models.DateTimeField()
    progress_s = models.FloatField(default=0.0, help_text="Checkpointed run time in seconds.")
    backoff_count = models.PositiveIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True, help_text="Backoff: not before.")
    needs_approval = models.BooleanField(default=False)
    # While preempting: when the grace period ends and who asked (for the requeue event).
    preempt_deadline = models.DateTimeField(null=True, blank=True)
    preempt_kind = models.CharField(max_length=16, blank=True)
    preempted_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # While pending after it preempted: its nomination (scheduling/engine/nomination.py), the
    # victims chosen for it and where their capacity is, so every cycle keeps that capacity
    # for it (scheduling/workers/snapshot.py reads it, the cycle writes and clears it).
    nomination = models.JSONField(null=True, blank=True)
    # The latest reason given (why pending / rejected); a new reason event is written only
    # when it changes, so consecutive cycles with the same reason record it once.
    reason_code = models.CharField(max_length=40, blank=True)
    reason_message = models.TextField(blank=True)
    # An interactive session (a notebook): stopped when its GPUs stay idle (sessions.py).
    interactive = models.BooleanField(default=False)
    idle_timeout_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="Its own idle limit (at most its queue's); empty: the "
        "queue's.")
    idle_since = models.DateTimeField(null=True, blank=True,
                                      help_text="Its GPUs idle since (telemetry).")
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    # What its pod sets ask for, summed (count x gpus), written with them by the services, so
    # that a queue position sums the GPUs ahead from the pending-head index alone. NULL: not
    # written (rows from before it, or pod sets written elsewhere, or changed since: a trigger
    # on the pod sets clears it): read from the pod sets.
    gpus_total = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True,
                                     editable=False)
    # A session's time limit: stopped once it has run this long (its open admission's running
    # time), extensions included; empty: the longest its session policy allows, else none.
    time_limit_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="A session's time limit (seconds of running), "
        "extensions included; empty: its policy's longest, else none.")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "submitted_at"], name="workload_state_submitted"),
            models.Index(fields=["queue", "state"], name="workload_queue_state"),
            # Lists, newest first (the model's ordering): the admin's and the API's pages read
            # 50 rows from this index instead of sorting every workload.
            models.Index(fields=["-submitted_at", "-id"], name="workload_newest_first"),
            # The heads of the queues the cycle reads (scheduling/workers/rows.py, _pending_heads).
            # Holding the GPUs too (PostgreSQL), a queue position reads only this index.
            models.Index(fields=["queue", "priority_class", "submitted_at", "id"],
                         include=["gpus_total"], condition=models.Q(state="pending"),
                         name="workload_pending_head"),
            # Nominated preemptors the cycle reads beyond the heads (workers/rows.py).
            models.Index(fields=["id"], name="workload_nominated",
                         condition=models.Q(state="pending", nomination__isnull=False)),
        ]
        constraints = [
            # A name is unique among a queue's open workloads (ended ones' may be used again).
            models.UniqueConstraint(
                fields=["queue", "name"], name=OPEN_NAME_CONSTRAINT,
                condition=models.Q(state__in=["pending", "reserved", "running", "preempting"])),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    @property
    def gpus(self) -> Decimal:
        """Total GPUs the gang asks for (fractions of a card count as their fraction)."""
        return sum((ps.count * ps.gpus for ps in self.pod_sets.all()), Decimal(0))


class PodSet(models.Model):
    """A group of identical pods of a workload; flavors in order of preference."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="pod_sets")
    index = models.PositiveSmallIntegerField()
    count = models.PositiveIntegerField()
    flavors = models.JSONField(default=list)
    # Whole cards, or a fraction 0 < f < 1 of one card in steps of 0.001 (QUOTA-SEMANTICS §10).
    gpus = models.DecimalField(max_digits=9, decimal_places=3, default=Decimal(0))
    cpu = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    memory_gib = models.DecimalField(max_digits=12, decimal_places=3, default=Decimal(0))
    gpu_memory_gib = models.PositiveIntegerField(null=True, blank=True)
    resources = models.JSONField(
        default=dict, blank=True,
        help_text="Extended resources per pod (nvidia.com/mig-1g.10gb, ...), each as an "
        "integer of its base unit (thousandths; bytes for memory-like ones).",
    )

    class Meta:
        ordering = ["workload_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["workload", "index"], name="podset_unique_index"),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}/{self.index}"


class EndReason(models.TextChoices):
    NONE = "", "(active)"
    FINISHED = "finished", "Finished"
    PREEMPTED = "preempted", "Preempted"
    CANCELLED = "cancelled", "Cancelled"
    REFUSED = "refused", "Refused by the cluster"
    PODS_READY_TIMEOUT = "pods_ready_timeout", "Pods-ready timeout"
    FAILED = "failed", "Failed"
    RECLAIMED_STUCK = "reclaimed_stuck", "Reclaimed (stuck)"
    IDLE = "idle", "Stopped idle"
    TIME_LIMIT = "time_limit", "Stopped at its time limit"


# Ends the portal decided while the pods may still run (the cluster did not end them): an
# ended, dispatched admission with one of these keeps its nodes' capacity until the cluster
# confirms the delete (`cleaned_at`). Finished and failed pods hold nothing.
UNCONFIRMED_END_REASONS = (EndReason.CANCELLED, EndReason.PREEMPTED,
                           EndReason.PODS_READY_TIMEOUT, EndReason.RECLAIMED_STUCK,
                           EndReason.IDLE, EndReason.TIME_LIMIT)


class Admission(models.Model):
    """One admission interval of a workload: where it was placed and when it ran."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="admissions")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="admissions")
    flavor = models.ForeignKey(
        "quotas.Flavor", on_delete=models.PROTECT, related_name="admissions"
    )
    nodes = models.JSONField(default=list, help_text="One node name per pod.")
    cards = models.JSONField(
        default=list, blank=True,
        help_text="Per pod, the card a fractional pod holds on its node (null for others); "
                  "empty when no pod is a fraction.")
    borrowed = models.BooleanField(default=False)
    gpus = models.DecimalField(max_digits=12, decimal_places=3, default=Decimal(0))
    cpu = models.DecimalField(max_digits=12, decimal_places=3, default=Decimal(0))
    memory_gib = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal(0))
    reserved_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(
        max_length=24, choices=EndReason.choices, blank=True, default=EndReason.NONE
    )
    # Repayment history (§6): a borrowed interval that did not yield in time was forced.
    forced = models.BooleanField(default=False)
    # Backend objects are removed after a TTL once the interval ended.
    cleaned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["reserved_at", "id"]
        indexes = [
            models.Index(fields=["cluster", "ended_at"], name="admission_cluster_ended"),
            # Ended, not yet cleaned up: what each cycle reads as still holding its nodes and
            # what maintenance cleans up after the TTL (a few rows of a table that only grows).
            models.Index(fields=["ended_at"], name="admission_uncleaned",
                         condition=models.Q(ended_at__isnull=False, cleaned_at__isnull=True)),
        ]
        constraints = [
            # At most one open admission per workload: no workload is admitted twice.
            models.UniqueConstraint(
                fields=["workload"], condition=models.Q(ended_at__isnull=True),
                name="admission_one_open_per_workload",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}@{self.cluster_id}"


class EventType(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    # A new workload running an ended one's request again; the same on the ended one.
    RESUBMITTED = "resubmitted", "Resubmitted"
    UPDATED = "updated", "Updated"  # a pending workload's request changed in place
    ADMITTED = "admitted", "Admitted"
    DISPATCHED = "dispatched", "Dispatched"
    REFUSED = "refused", "Refused by the cluster"
    RUNNING = "running", "Running"
    PREEMPTED = "preempted", "Preempted"
    REQUEUED = "requeued", "Requeued"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
    REJECTED = "rejected", "Rejected"
    FAILED = "failed", "Failed"
    REASON = "reason", "Reason"
    TIMEOUT = "timeout", "Timeout"
    RECLAIMED = "reclaimed", "Reclaimed (stuck)"
    POLICY = "policy", "Policy"
    UNCONFIRMED = "unconfirmed", "Not confirmed by the cluster"


class EventCode(enum.StrEnum):
    """The codes the portal and the workers give reasons and events (the engine's own are
    `engine.ReasonCode`)."""

    NEEDS_APPROVAL = "NEEDS_APPROVAL"
    APPROVED = "APPROVED"
    APPROVAL_GIVEN = "APPROVAL_GIVEN"  # one of several approvals (ALLOT_MIN_APPROVERS > 1)
    APPROVAL_DENIED = "APPROVAL_DENIED"
    DISPATCH_REFUSED = "DISPATCH_REFUSED"
    RESUBMITTED = "RESUBMITTED"
    UPDATED = "UPDATED"
    STUCK_PENDING = "STUCK_PENDING"
    STUCK_RESERVED = "STUCK_RESERVED"
    STUCK_RUNNING = "STUCK_RUNNING"
    STUCK_PREEMPTING = "STUCK_PREEMPTING"
    DELETE_UNCONFIRMED = "DELETE_UNCONFIRMED"
    SUSPEND_UNCONFIRMED = "SUSPEND_UNCONFIRMED"
    IDLE_WARNING = "IDLE_WARNING"  # an interactive session about to be stopped idle
    IDLE_STOPPED = "IDLE_STOPPED"
    SESSION_EXTENDED = "SESSION_EXTENDED"  # a session's time limit extended by its owner
    EXTENSION_REFUSED = "EXTENSION_REFUSED"  # ... or not: the quota or a policy refused
    TIME_LIMIT_WARNING = "TIME_LIMIT_WARNING"  # a session about to reach its time limit
    TIME_LIMIT_STOPPED = "TIME_LIMIT_STOPPED"  # a session stopped at its time limit
    ORPHAN_DELETED = "ORPHAN_DELETED"  # its objects, left on a cluster, swept away


class WorkloadEvent(models.Model):
    """One step of a workload's timeline: a state change, a reason, a policy decision."""

    # No index of its own: `event_workload_at` (workload, at) serves lookups by workload.
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events",
                                 db_index=False)
    at = models.DateTimeField()
    type = models.CharField(max_length=16, choices=EventType.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    code = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["workload", "at"], name="event_workload_at"),
            models.Index(fields=["type", "at"], name="event_type_at"),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.type} {self.code}"


class CycleMark(models.Model):
    """The last scheduling cycle (one row): when it ended and how long it took, so that the
    cycles submissions ask for are paced across every worker process (scheduling/pacing.py)."""

    ended_at = models.DateTimeField(null=True, blank=True)
    seconds = models.FloatField(default=0.0)
    deferred_until = models.DateTimeField(null=True, blank=True)  # the one paced nudge queued
    # The leaves whose guarantee borrowed work blocked after that cycle (the engine's
    # `violating_leaves`), for /metrics' allot_guarantee_unmet.
    guarantee_blocked = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return f"cycle ended {self.ended_at} after {self.seconds:.3f} s"


class MetricTally(models.Model):
    """A running total behind a counter or histogram of /metrics, kept in the database so it
    survives restarts and is the same whichever process serves the scrape: workload events
    folded in once they are old enough (scheduling/monitoring.py) and the cycles' durations,
    added by each cycle (scheduling/tallies.py)."""

    family = models.CharField(max_length=40)
    queue_id = models.IntegerField(default=0, help_text="A queue's id; 0: no queue.")
    label = models.CharField(max_length=200, blank=True)
    value = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["family", "queue_id", "label"],
                                    name="metrictally_unique_series"),
        ]

    def __str__(self) -> str:
        return f"{self.family} {self.queue_id} {self.label} = {self.value:g}"


class OutboxKind(models.TextChoices):
    DELETE = "delete", "Delete the admission's objects"
    SUSPEND = "suspend", "Suspend the admission's objects (preempted)"
    DISPATCH = "dispatch", "Dispatch pass on the cluster"
    EVENT = "event", "Post a reason as an Event on an adopted object"


class OutboxMessage(models.Model):
    """A call to a cluster, written in the transaction of the state change that needs it and
    delivered by the workers until the cluster confirms it (scheduling/fleet/delivery.py)."""

    kind = models.CharField(max_length=16, choices=OutboxKind.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    admission = models.ForeignKey(Admission, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="+")
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The due ones, oldest first: what every delivery pass reads.
            models.Index(fields=["next_attempt_at", "id"], name="outbox_due",
                         condition=models.Q(delivered_at__isnull=True)),
            models.Index(fields=["delivered_at"], name="outbox_delivered"),
        ]

    def __str__(self) -> str:
        target = f"admission {self.admission_id}" if self.admission_id else "cluster"
        return f"{self.kind} {target} on {self.cluster_id}"


# The longest "what it assumes" kept (scheduling/workers/eta.py cuts a longer one at a clause).
ASSUMES_MAX = 1000


class WorkloadEstimate(models.Model):
    """A pending workload's forecast start, from the latest forecast (scheduling/workers/eta.py):
    `start`, `low`-`high` the range over run-time percentiles (null: later than the
    horizon), and what it assumes."""

    workload = models.OneToOneField(Workload, on_delete=models.CASCADE,
                                    related_name="estimate")
    start = models.DateTimeField(null=True, blank=True)
    low = models.DateTimeField(null=True, blank=True)
    high = models.DateTimeField(null=True, blank=True)
    assumes = models.CharField(max_length=ASSUMES_MAX, blank=True)
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"estimate of workload {self.workload_id}: {self.start}"


class FirstEstimate(models.Model):
    """A workload's first forecast start, kept after it starts: new forecasts are calibrated
    by how these came out (scheduling/engine/calibration.py, scheduling/workers/eta.py)."""

    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, primary_key=True,
                                    related_name="first_estimate")
    made_at = models.DateTimeField()
    # The forecast as simulated, before any calibration.
    start = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["start"], name="first_estimate_start")]

    def __str__(self) -> str:
        return f"first estimate of workload {self.workload_id}: {self.start}"


class WhatIfState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class WhatIf(models.Model):
    """A what-if on the live state: the next hours replayed as they stand and with changes
    (scheduling/whatif/); its scenario is kept so it can be downloaded and simulated."""

    owner = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="what_ifs")
    created_at = models.DateTimeField()
    hours = models.FloatField()
    changes = models.JSONField(default=dict)
    scenario = models.JSONField(default=dict, help_text="The baseline scenario (live state).")
    state = models.CharField(max_length=16, choices=WhatIfState.choices,
                             default=WhatIfState.QUEUED)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.state})"


class TraceReplay(models.Model):
    """A trace replayed under static quotas, the current tree and a proposed tree, for the
    capacity planner (scheduling/planner/); the upload is kept until the task has read it,
    then the three scenarios (for download)."""

    owner = models.ForeignKey("auth.User", on_delete=models.CASCADE,
                              related_name="trace_replays")
    created_at = models.DateTimeField()
    name = models.CharField(max_length=200, help_text="The uploaded file's name, or the source.")
    kind = models.CharField(max_length=16, help_text="philly, alibaba, scenario or history.")
    workloads = models.PositiveIntegerField(default=0)
    notes = models.JSONField(default=list, blank=True)
    changes = models.JSONField(default=dict, blank=True,
                               help_text="The proposal's quota changes.")
    scenarios = models.JSONField(default=dict,
                                 help_text="static, current and proposed, as scenario files.")
    upload = models.BinaryField(null=True, blank=True, editable=False,
                                help_text="The uploaded file until the task has read it.")
    flavor = models.CharField(max_length=100, blank=True,
                              help_text="The GPU model a CSV's jobs ask (blank: the largest).")
    tree = models.JSONField(null=True, blank=True,
                            help_text="A proposed tree's queues, in place of the current one.")
    problems = models.JSONField(default=dict, blank=True,
                                help_text="Why the upload was refused: field or line to messages.")
    state = models.CharField(max_length=16, choices=WhatIfState.choices,
                             default=WhatIfState.QUEUED)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"trace replay {self.pk} ({self.state})"
