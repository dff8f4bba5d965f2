"""The cluster backend protocol: what the workers ask of a cluster, and what comes back.

Pure Python (no Django, no kubernetes import here). `registry.get_backend(cluster)` takes the
Cluster model instance (or any object with `name`, `backend` and `connection`) and returns a
backend.

Error contract, which two-phase dispatch relies on:
- `DispatchRefused(reason, message)`: the cluster said no to this workload for a local reason
  (API validation error, namespace forbidden, node gone, the simulated cluster told to refuse).
  Retrying the same call will not help; release the reservation and place it elsewhere.
- `BackendError(message, status=...)`: the cluster could not be reached or failed (HTTP 5xx,
  timeout, connection refused). Retryable; `retryable` is False only for errors that retrying
  cannot fix (e.g. a bad kubeconfig).

Every call is idempotent: creating what exists, deleting what is gone, suspending what is
suspended all succeed quietly, so a task may be retried after a crash at any point.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from scheduling.backends.naming import job_name


class RefusalReason(enum.StrEnum):
    """Why a cluster refused a dispatch (the `reason` of DispatchRefused)."""

    NAMESPACE_FORBIDDEN = "namespace_forbidden"
    INVALID = "invalid"  # the API rejected the object (HTTP 422 / 400)
    NODE_GONE = "node_gone"  # an assigned node no longer exists or is not ready
    API_ERROR = "api_error"  # any other 4xx answer
    REFUSED = "refused"  # the (simulated) cluster was told to refuse dispatches
    CONFLICT = "conflict"  # a Job of that name exists but belongs to another workload
    JOB_GONE = "job_gone"  # start_workload found a Job missing (deleted behind our back)
    KIND_NOT_SERVED = "kind_not_served"  # the cluster's API does not serve the workload's kind


class BackendError(Exception):
    """The cluster could not do what was asked (unreachable, 5xx, timeout); usually retryable."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True):
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"HTTP {self.status}: {self.message}"


class DispatchRefused(Exception):
    """The cluster refused this workload for a local reason; place it elsewhere."""

    def __init__(self, reason: RefusalReason | str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = RefusalReason(reason)
        self.message = message


class ClusterEventType(enum.StrEnum):
    """Kubernetes Event types."""

    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class FlavorMatch:
    """How a flavor's nodes are recognised: all of `node_selector` must match a node's labels."""

    name: str
    node_selector: Mapping[str, str]
    interconnect_label: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """One node as the cluster reports it (allocatable resources, readiness, labels)."""

    name: str
    flavor: str | None  # the first FlavorMatch whose selector matches; None = no known flavor
    gpus: int
    cpu: Decimal
    memory_gib: Decimal
    ready: bool
    rack: str = ""  # the flavor's interconnect label value, else topology.kubernetes.io/zone
    labels: Mapping[str, str] = field(default_factory=dict)
    # Every other allocatable resource (MIG slices, amd.com/gpu, ephemeral-storage, ...), as
    # integers of its base unit (core.quantity.to_base).
    resources: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodSetSpec:
    """One pod set: `count` identical pods, each with these resources, on one flavor."""

    index: int
    count: int
    flavor: str
    gpus: Decimal  # whole cards per pod, or a fraction 0 < f < 1 of one card
    cpu: Decimal  # cores per pod (request)
    memory_gib: Decimal  # per pod (request)
    node_selector: Mapping[str, str] = field(default_factory=dict)  # the flavor's
    # Extended resources per pod (MIG slices, ...), integers of each one's base unit.
    resources: Mapping[str, int] = field(default_factory=dict)
    # The nodes the engine chose, one per pod (may repeat). Kubernetes keeps pods on this set
    # of nodes with a node affinity; the simulated cluster places pod k on nodes[k].
    nodes: tuple[str, ...] = ()
    # A fraction's GPU memory slice (None: its share of the card), the flavor's memory per
    # card, and per pod the card the engine chose on its node (empty: not a fraction).
    gpu_memory_gib: Decimal | None = None
    card_memory_gib: Decimal | None = None
    cards: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything a backend needs to run one admitted workload on one cluster."""

    workload_id: int
    name: str  # the human name, for annotations and events
    namespace: str  # the leaf queue's namespace
    queue_path: str  # e.g. "rd/vision"
    pod_sets: tuple[PodSetSpec, ...]
    image: str = ""
    command: tuple[str, ...] = ()
    priority_class: str = ""  # PriorityClass name; "" = none
    termination_grace_s: int = 30
    # Run time left (duration hint minus checkpointed progress). Only the simulated cluster
    # uses it: its pods succeed after this many (sped-up) seconds. None = run until deleted.
    duration_s: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # extra labels for every Job
    annotations: Mapping[str, str] = field(default_factory=dict)
    # A workload submitted as a manifest: its kind (`apiVersion/Kind`, scheduling.kinds) and
    # the object, created as one object instead of a Job per pod set. "" = Allot's Jobs.
    kind: str = ""
    manifest: Mapping[str, Any] = field(default_factory=dict)
    object_name: str = ""  # an adopted object's own name ("" = Allot names it)
    # One replica group of an adopted object (a LeaderWorkerSet's group index): its pods are
    # gated and lifted, the object is the user's. None = the whole object.
    group: int | None = None

    @property
    def ref(self) -> WorkloadRef:
        """The reference to the cluster objects this spec creates."""
        return WorkloadRef.for_workload(
            namespace=self.namespace,
            workload_id=self.workload_id,
            pod_set_indexes=[p.index for p in self.pod_sets],
            kind=self.kind, object_name=self.object_name, group=self.group,
        )


@dataclass(frozen=True)
class WorkloadRef:
    """Where a workload lives on a cluster: its namespace and its Job names (one per pod set)."""

    namespace: str
    workload_id: int
    job_names: tuple[str, ...]
    # A manifest workload's kind (`apiVersion/Kind`): one object of that kind, named
    # `object_name`, whose pods carry the pod set label; "" = a Job per pod set.
    kind: str = ""
    adopted_name: str = ""  # the object's own name when the user created it (the webhook)
    group: int | None = None  # one replica group of the adopted object (its pods only)
    # When its oldest object was created (list_workloads; None: not known): the orphan sweep
    # waits the TTL from it for an object whose workload is gone.
    created_at: datetime | None = field(default=None, compare=False)

    @property
    def object_name(self) -> str:
        """The name of a manifest workload's object: its own when adopted, else its first pod
        set's Job name."""
        return self.adopted_name or (self.job_names[0] if self.job_names else "")

    @classmethod
    def for_workload(
        cls, *, namespace: str, workload_id: int, pod_set_indexes: Sequence[int],
        kind: str = "", object_name: str = "", group: int | None = None,
    ) -> WorkloadRef:
        """Build the reference from database facts (so workers never need to store it)."""
        return cls(
            namespace=namespace,
            workload_id=workload_id,
            job_names=tuple(job_name(workload_id, i) for i in pod_set_indexes),
            kind=kind, adopted_name=object_name if kind else "",
            group=group if kind and object_name else None,
        )


class RunPhase(enum.StrEnum):
    """The overall phase of a workload on a cluster, derived from its pod sets."""

    MISSING = "missing"  # no Job of it exists (never created, or deleted)
    SUSPENDED = "suspended"  # created (or preempted) and suspended
    PENDING = "pending"  # unsuspended, not every pod running yet
    RUNNING = "running"  # every pod of every pod set running (pods ready)
    SUCCEEDED = "succeeded"  # every pod of every pod set succeeded
    FAILED = "failed"  # some Job failed


@dataclass(frozen=True)
class PodSetStatus:
    """Pods of one pod set (one Job) by state."""

    job_name: str
    exists: bool
    count: int = 0  # pods wanted (completions)
    suspended: bool = False
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    job_failed: bool = False  # the Job's Failed condition is true
    message: str = ""  # the Failed condition's message, if any


@dataclass(frozen=True)
class WorkloadStatus:
    """The status of every pod set of a workload on a cluster."""

    ref: WorkloadRef
    pod_sets: tuple[PodSetStatus, ...]

    @property
    def phase(self) -> RunPhase:
        """One phase for the whole gang; any failure fails it, all must run to be running."""
        sets = self.pod_sets
        if not sets or not all(p.exists for p in sets):
            return RunPhase.MISSING
        if any(p.job_failed for p in sets):
            return RunPhase.FAILED
        if all(p.count > 0 and p.succeeded >= p.count for p in sets):
            return RunPhase.SUCCEEDED
        if any(p.suspended for p in sets):
            return RunPhase.SUSPENDED
        if all(p.running + p.succeeded >= p.count for p in sets):
            return RunPhase.RUNNING
        return RunPhase.PENDING

    @property
    def message(self) -> str:
        """The first failure message, or ''."""
        return next((p.message for p in self.pod_sets if p.message), "")

    def totals(self) -> dict[str, int]:
        """Pods by state summed over pod sets (for pages and events)."""
        return {
            "pending": sum(p.pending for p in self.pod_sets),
            "running": sum(p.running for p in self.pod_sets),
            "succeeded": sum(p.succeeded for p in self.pod_sets),
            "failed": sum(p.failed for p in self.pod_sets),
        }


@dataclass(frozen=True)
class WatchResult:
    """What changed on a cluster since a bookmark (see ClusterBackend.watch_workloads)."""

    changed: frozenset[int]  # workload ids whose Jobs (pods) changed
    resource_version: str  # the bookmark to pass next time
    expired: bool = False  # the bookmark was too old: resync every workload, then go on


@dataclass(frozen=True)
class DispatchOutcome:
    """What became of one workload of a batch dispatch (see BatchDispatch)."""

    ref: WorkloadRef
    refused: DispatchRefused | None = None  # release the reservation, place it elsewhere
    error: BackendError | None = None  # retry later
    running: bool = False  # every pod runs already (no need to wait for a watch to see it)


@runtime_checkable
class BatchDispatch(Protocol):
    """An optional capability: create and start many workloads in a few round trips.

    Backends without it are dispatched one workload at a time (create, then start)."""

    def dispatch_many(
        self, specs: Sequence[WorkloadSpec], *, replace: frozenset[int] = frozenset()
    ) -> list[DispatchOutcome]:
        """One outcome per spec, in order; workloads in `replace` lose their previous Jobs
        of the same names first."""
        ...


@runtime_checkable
class ServedKinds(Protocol):
    """An optional capability: which workload kinds (`apiVersion/Kind`) the cluster serves.

    Dispatch refuses a kind not served (KIND_NOT_SERVED); node sync records the list."""

    def served_kinds(self) -> list[str]:
        """The kinds of scheduling.kinds this cluster's API serves."""
        ...


@runtime_checkable
class ScalableObjects(Protocol):
    """An optional capability: scaling the object of a scalable kind (Deployment,
    StatefulSet) and lifting the gate from as many of its pods as are admitted."""

    def admit_pods(self, ref: WorkloadRef, count: int) -> None:
        """`count` pods of the object are admitted: lift the gate from that many."""
        ...

    def scale_object(self, ref: WorkloadRef, replicas: int) -> None:
        """Set the object's replicas."""
        ...


@dataclass(frozen=True)
class AdoptedObject:
    """An object adopted from the cluster whose replica groups are workloads of their own (a
    LeaderWorkerSet applied with the queue label): what it asks and the groups it lists."""

    namespace: str
    name: str
    replicas: int
    workload_ids: tuple[int, ...]  # its groups' workloads, in group order
    first_workload_id: int | None  # the workload the webhook labelled it with (its group 0)


@runtime_checkable
class AdoptedGroups(Protocol):
    """An optional capability: listing and rewriting the replica groups of the objects adopted
    from the cluster, so a `kubectl scale` of one is followed."""

    def adopted_objects(self, kind: str) -> list[AdoptedObject]:
        """Every object of `kind` (`apiVersion/Kind`) that lists its groups' workloads, in
        every namespace ([] when the cluster does not serve the kind)."""
        ...

    def set_adopted_groups(self, kind: str, namespace: str, name: str, workload_ids: list[int],
                           fresh: list[int]) -> bool:
        """List these workload ids as the object's groups, forgetting what was recorded of
        the groups `fresh` (new groups); False when the object is gone."""
        ...


@dataclass(frozen=True)
class PriorityClassSpec:
    """A PriorityClass to keep on every cluster."""

    name: str
    value: int
    description: str = ""
    preemption_policy: str = "PreemptLowerPriority"  # or "Never"


@runtime_checkable
class ClusterBackend(Protocol):
    """One cluster, as the workers see it. All calls are synchronous and idempotent."""

    name: str

    def list_nodes(self, flavors: Sequence[FlavorMatch] | None = None) -> list[NodeInfo]:
        """Nodes with allocatable resources; `flavors` (None = load from the database) decide
        each node's flavor."""
        ...

    def ensure_namespace(self, namespace: str) -> None:
        """Create the namespace if missing; DispatchRefused(NAMESPACE_FORBIDDEN) on 403."""
        ...

    def create_workload(self, spec: WorkloadSpec) -> WorkloadRef:
        """Create one suspended Job per pod set (the namespace too, if missing).

        Raises DispatchRefused on a local refusal, BackendError when the cluster failed.
        An existing Job of the same workload counts as created.
        """
        ...

    def start_workload(self, ref: WorkloadRef) -> None:
        """Unsuspend every Job of the workload (admission confirmed)."""
        ...

    def suspend_workload(self, ref: WorkloadRef, grace_s: int) -> None:
        """Suspend every Job (preemption); pods stop within `grace_s` seconds."""
        ...

    def delete_workload(self, ref: WorkloadRef) -> None:
        """Delete every Job and its pods; missing Jobs are fine."""
        ...

    def workload_status(self, ref: WorkloadRef) -> WorkloadStatus:
        """Pods pending/running/succeeded/failed per pod set."""
        ...

    def workload_statuses(self, refs: Sequence[WorkloadRef]) -> list[WorkloadStatus]:
        """workload_status of many workloads at once, in the order given (few round trips:
        one query on a simulated cluster, two list calls per namespace on Kubernetes)."""
        ...

    def list_workloads(self) -> list[WorkloadRef]:
        """Every Allot workload present on the cluster (for cleanup of orphans)."""
        ...

    def watch_workloads(self, *, timeout_s: float, resource_version: str = "") -> WatchResult:
        """Wait up to `timeout_s` for Allot Jobs to change after the bookmark; return at the
        first change. No bookmark: every current workload counts as changed (a resync)."""
        ...

    def post_event(
        self, ref: WorkloadRef, type: ClusterEventType | str, reason: str, message: str
    ) -> None:
        """Record a reason on the cluster, regarding each Job (`kubectl describe job`)."""
        ...

    def sync_priority_classes(self, classes: Sequence[PriorityClassSpec]) -> None:
        """Create or update these PriorityClasses (others are left alone)."""
        ...


