"""The Kubernetes backend: the official client, one API client per cluster.

Each pod set is a `batch/v1` Job created with `spec.suspend: true` (as Kueue does), unsuspended
on start and suspended again on preemption. Reasons become `events.k8s.io/v1` Events regarding
the Job, so `kubectl describe job` shows them. Requests carry short timeouts and no automatic
retries: the Celery task that called us decides when to retry.

`Cluster.connection` is one of
    {"kubeconfig": "/path/to/config", "context": "name"}
    {"in_cluster": true}
    {"host": "https://...", "token": "...", "verify_ssl": false, "ca_cert": "/path"}
plus optional `timeout_s` (read timeout, default 10), `connect_timeout_s` (default 3) and
`default_image` (used when a workload names no image).
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.utils.quantity import parse_quantity

from scheduling.backends.base import (
    BackendError,
    ClusterEventType,
    DispatchRefused,
    FlavorMatch,
    NodeInfo,
    PodSetSpec,
    PodSetStatus,
    PriorityClassSpec,
    RefusalReason,
    WatchResult,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
)
from scheduling.backends.flavors import (
    load_flavor_matches,
    match_flavor,
    priority_classes_from_db,
)
from scheduling.backends.naming import (
    LABEL_MANAGED_BY,
    LABEL_WORKLOAD_ID,
    MANAGED_BY,
    job_labels,
    parse_job_name,
)

logger = logging.getLogger(__name__)


GPU_RESOURCE = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
MERGE_PATCH = "application/merge-patch+json"
REPORTING_CONTROLLER = "allot.io/scheduler"
GIB = Decimal(2**30)
MILLI = Decimal("0.001")


def _status_message(error: k8s.ApiException) -> str:
    """The `message` of the Status object the API answered with (or the HTTP reason)."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(error.reason or "no message")


def format_cpu(cores: Decimal) -> str:
    """Cores as a Kubernetes quantity: `4` or `1500m`."""
    cores = Decimal(cores)
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{int((cores * 1000).to_integral_value(ROUND_HALF_UP))}m"


def format_memory(gib: Decimal) -> str:
    """GiB as a Kubernetes quantity: `256Gi` or `1536Mi`."""
    gib = Decimal(gib)
    if gib == gib.to_integral_value():
        return f"{int(gib)}Gi"
    return f"{int((gib * 1024).to_integral_value(ROUND_HALF_UP))}Mi"


class KubernetesBackend:
    """A Kubernetes cluster reached through the official client (see the module docstring)."""

    def __init__(
        self, *, name: str, connection: dict[str, Any], api_client: k8s.ApiClient | None = None
    ):
        self.name = name
        self.connection = dict(connection)
        self.read_timeout = float(self.connection.get("timeout_s", 10))
        self.connect_timeout = float(self.connection.get("connect_timeout_s", 3))
        self._api_client = api_client
        self._lock = threading.Lock()
        self._known_namespaces: set[str] = set()
        self._known_priority_classes: set[str] = set()

    # -------------------------------------------------------------- plumbing
    @property
    def api_client(self) -> k8s.ApiClient:
        with self._lock:
            if self._api_client is None:
                self._api_client = self._build_client()
            return self._api_client

    def _build_client(self) -> k8s.ApiClient:
        conn = self.connection
        configuration = k8s.Configuration()
        try:
            if conn.get("in_cluster"):
                k8s_config.load_incluster_config(client_configuration=configuration)
            elif conn.get("kubeconfig"):
                k8s_config.load_kube_config(
                    config_file=conn["kubeconfig"], context=conn.get("context") or None,
                    client_configuration=configuration, persist_config=False,
                )
            elif conn.get("host"):
                configuration.host = str(conn["host"]).rstrip("/")
                if conn.get("token"):
                    configuration.api_key = {"authorization": f"Bearer {conn['token']}"}
                configuration.verify_ssl = bool(conn.get("verify_ssl", True))
                if conn.get("ca_cert"):
                    configuration.ssl_ca_cert = conn["ca_cert"]
            else:
                raise BackendError(
                    f"cluster {self.name}: connection needs 'kubeconfig', 'in_cluster' or "
                    f"'host' (got keys {sorted(conn)})",
                    retryable=False,
                )
        except (k8s_config.ConfigException, OSError) as error:
            raise BackendError(
                f"cluster {self.name}: cannot load its Kubernetes configuration: {error}",
                retryable=False,
            ) from error
        # No urllib3 retries: a timed-out call surfaces at once and the task retries it.
        configuration.retries = False
        return k8s.ApiClient(configuration)

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client)

    @property
    def batch(self) -> k8s.BatchV1Api:
        return k8s.BatchV1Api(self.api_client)

    @property
    def events(self) -> k8s.EventsV1Api:
        return k8s.EventsV1Api(self.api_client)

    @property
    def scheduling(self) -> k8s.SchedulingV1Api:
        return k8s.SchedulingV1Api(self.api_client)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the API with the timeouts; transport failures become a retryable BackendError.

        ApiExceptions (the API answered) pass through for the caller to interpret, except
        401, 429 and 5xx, which mean the same thing everywhere.
        """
        kwargs.setdefault("_request_timeout", (self.connect_timeout, self.read_timeout))
        try:
            return fn(*args, **kwargs)
        except k8s.ApiException as error:
            status = int(error.status or 0)
            message = _status_message(error)
            if status == 0:
                raise BackendError(f"cluster {self.name}: {what}: {message}") from error
            if status == 401:
                raise BackendError(
                    f"cluster {self.name}: {what}: unauthorized ({message}); check its "
                    "credentials", status=401, retryable=False,
                ) from error
            if status == 429 or status >= 500:
                raise BackendError(
                    f"cluster {self.name}: {what}: {message}", status=status
                ) from error
            raise
        except (urllib3.exceptions.HTTPError, OSError) as error:
            # NewConnectionError subclasses the timeout error in urllib3: test it first.
            if isinstance(error, urllib3.exceptions.NewConnectionError | ConnectionError):
                kind = "unreachable"
            elif isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
                kind = "timed out"
            else:
                kind = "unreachable"
            raise BackendError(
                f"cluster {self.name}: {what}: API {kind} (timeout {self.read_timeout:g} s) "
                f"({type(error).__name__}: {error})"
            ) from error

    @contextmanager
    def _refusals(self, what: str) -> Iterator[None]:
        """Inside a dispatch, the API's 4xx answers are refusals of this workload."""
        try:
            yield
        except k8s.ApiException as error:
            status, message = int(error.status or 0), _status_message(error)
            if status == 403 and " cannot " in message:
                # RBAC: this service account may not create in that namespace.
                raise DispatchRefused(
                    RefusalReason.NAMESPACE_FORBIDDEN, f"{what}: forbidden: {message}"
                ) from error
            if status in (400, 422):
                raise DispatchRefused(
                    RefusalReason.INVALID, f"{what}: HTTP {status}: {message}"
                ) from error
            raise DispatchRefused(
                RefusalReason.API_ERROR, f"{what}: HTTP {status}: {message}"
            ) from error

    def _unexpected(self, what: str, error: k8s.ApiException) -> BackendError:
        return BackendError(
            f"cluster {self.name}: {what}: {_status_message(error)}",
            status=int(error.status or 0), retryable=False,
        )

    # -------------------------------------------------------------- nodes
    def list_nodes(self, flavors: Sequence[FlavorMatch] | None = None) -> list[NodeInfo]:
        """Nodes with allocatable GPUs, cpu, memory (GiB), readiness, flavor and rack."""
        matches = list(flavors) if flavors is not None else load_flavor_matches()
        try:
            answer = self._call("list nodes", self.core.list_node)
        except k8s.ApiException as error:
            raise self._unexpected("list nodes", error) from error
        return [self._node_info(node, matches) for node in answer.items]

    @staticmethod
    def _node_info(node: Any, flavors: Sequence[FlavorMatch]) -> NodeInfo:
        labels = dict(node.metadata.labels or {})
        allocatable = dict((node.status and node.status.allocatable) or {})
        flavor = match_flavor(labels, flavors)
        conditions = (node.status and node.status.conditions) or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        if node.spec is not None and node.spec.unschedulable:
            ready = False
        rack = ""
        if flavor is not None and flavor.interconnect_label:
            rack = labels.get(flavor.interconnect_label, "")
        rack = rack or labels.get(ZONE_LABEL, "")
        memory = parse_quantity(allocatable.get("memory", "0")) / GIB
        return NodeInfo(
            name=node.metadata.name,
            flavor=flavor.name if flavor is not None else None,
            gpus=int(parse_quantity(allocatable.get(GPU_RESOURCE, "0"))),
            cpu=parse_quantity(allocatable.get("cpu", "0")).quantize(MILLI),
            memory_gib=memory.quantize(MILLI),
            ready=ready,
            rack=rack,
            labels=labels,
        )

    # -------------------------------------------------------------- namespaces
    def ensure_namespace(self, namespace: str) -> None:
        """Create the namespace if missing; 403 (RBAC) is a refusal naming the namespace."""
        if namespace in self._known_namespaces:
            return
        what = f'namespace "{namespace}"'
        try:
            self._call(f"read {what}", self.core.read_namespace, namespace)
        except k8s.ApiException as error:
            if error.status not in (403, 404):
                raise self._unexpected(f"read {what}", error) from error
            # 403 on read: we may still be allowed to create it (or it exists: 409).
            self._create_namespace(namespace)
        self._known_namespaces.add(namespace)

    def _create_namespace(self, namespace: str) -> None:
        body = {"metadata": {"name": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}}}
        try:
            self._call(f'create namespace "{namespace}"', self.core.create_namespace, body)
        except k8s.ApiException as error:
            if error.status == 409:
                return
            if error.status == 403:
                raise DispatchRefused(
                    RefusalReason.NAMESPACE_FORBIDDEN,
                    f'namespace "{namespace}" forbidden on cluster {self.name}: '
                    f"{_status_message(error)}",
                ) from error
            if error.status in (400, 422):
                raise DispatchRefused(
                    RefusalReason.INVALID,
                    f'namespace "{namespace}" rejected by cluster {self.name}: '
                    f"{_status_message(error)}",
                ) from error
            raise self._unexpected(f'create namespace "{namespace}"', error) from error

    # -------------------------------------------------------------- workloads
    def job_body(self, spec: WorkloadSpec, pod_set: PodSetSpec) -> dict[str, Any]:
        """The Job of one pod set: suspended, gang-sized, pinned to the flavor (and nodes)."""
        name = spec.ref.job_names[spec.pod_sets.index(pod_set)]
        labels = {
            **{str(k): str(v) for k, v in spec.labels.items()},
            **job_labels(
                workload_id=spec.workload_id, queue_path=spec.queue_path,
                pod_set_index=pod_set.index, flavor=pod_set.flavor,
            ),
        }
        annotations = {"allot.io/workload-name": spec.name, **spec.annotations}
        requests: dict[str, str] = {}
        if pod_set.cpu:
            requests["cpu"] = format_cpu(pod_set.cpu)
        if pod_set.memory_gib:
            requests["memory"] = format_memory(pod_set.memory_gib)
        limits: dict[str, str] = {}
        if pod_set.gpus:
            limits[GPU_RESOURCE] = str(int(pod_set.gpus))
        container: dict[str, Any] = {
            "name": "main",
            "image": spec.image or self.connection.get("default_image", ""),
            "resources": {"requests": requests, "limits": limits},
        }
        if spec.command:
            container["command"] = list(spec.command)
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": int(spec.termination_grace_s),
            "nodeSelector": dict(pod_set.node_selector),
            "containers": [container],
        }
        if spec.priority_class:
            pod_spec["priorityClassName"] = spec.priority_class
        if pod_set.gpus:
            pod_spec["tolerations"] = [
                {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
            ]
        if pod_set.nodes:
            # The engine chose these nodes; keep the scheduler to them (gang, topology).
            pod_spec["affinity"] = {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                    "matchExpressions": [{
                        "key": HOSTNAME_LABEL, "operator": "In",
                        "values": sorted(set(pod_set.nodes)),
                    }],
                }]},
            }}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name, "namespace": spec.namespace,
                "labels": labels, "annotations": annotations,
            },
            "spec": {
                "suspend": True,
                "parallelism": int(pod_set.count),
                "completions": int(pod_set.count),
                # Allot requeues a failed gang itself; Kubernetes must not restart pods of it.
                "backoffLimit": 0,
                "completionMode": "Indexed",
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": pod_spec,
                },
            },
        }

    def _check_priority_class(self, name: str) -> None:
        """A Job whose PriorityClass is missing is accepted but never gets pods (the Priority
        admission plugin refuses them). A missing class is synced from the database once;
        still missing, the dispatch is refused instead of left to stall."""
        if not name or name in self._known_priority_classes:
            return
        if self._priority_class_exists(name):
            self._known_priority_classes.add(name)
            return
        self.sync_priority_classes(priority_classes_from_db())
        if not self._priority_class_exists(name):
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"PriorityClass {name} does not exist on cluster {self.name}, nor in Allot's "
                "priority classes to create it from",
            )

    def _priority_class_exists(self, name: str) -> bool:
        what = f'read PriorityClass "{name}"'
        try:
            self._call(what, self.scheduling.read_priority_class, name)
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            if error.status == 403:
                return True  # not allowed to read it: let the cluster decide
            raise self._unexpected(what, error) from error
        return True

    def _check_nodes(self, spec: WorkloadSpec) -> None:
        """Two-phase dispatch: an assigned node that vanished or went NotReady is a refusal.

        A few nodes are read one by one; a big gang's nodes with one list call.
        """
        wanted = sorted({n for p in spec.pod_sets for n in p.nodes})
        if not wanted:
            return
        nodes: dict[str, Any] = {}
        if len(wanted) > 3:
            try:
                listed = self._call("list nodes", self.core.list_node).items
            except k8s.ApiException as error:
                raise self._unexpected("list nodes", error) from error
            nodes = {n.metadata.name: n for n in listed}
        else:
            for node_name in wanted:
                what = f'read node "{node_name}"'
                try:
                    nodes[node_name] = self._call(what, self.core.read_node, node_name)
                except k8s.ApiException as error:
                    if error.status != 404:
                        raise self._unexpected(what, error) from error
        for node_name in wanted:
            node = nodes.get(node_name)
            if node is None:
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node_name} no longer exists on cluster {self.name}",
                )
            conditions = (node.status and node.status.conditions) or []
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
            if not ready or (node.spec is not None and node.spec.unschedulable):
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node_name} on cluster {self.name} is not ready or is cordoned",
                )

    def create_workload(self, spec: WorkloadSpec) -> WorkloadRef:
        """Create one suspended Job per pod set; on a refusal, remove the ones just created."""
        if not spec.pod_sets or any(p.count < 1 for p in spec.pod_sets):
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"workload {spec.workload_id} has no pods to create "
                f"(pod counts {[p.count for p in spec.pod_sets]})",
            )
        self.ensure_namespace(spec.namespace)
        self._check_priority_class(spec.priority_class)
        self._check_nodes(spec)
        ref = spec.ref
        created: list[str] = []
        try:
            for pod_set in spec.pod_sets:
                body = self.job_body(spec, pod_set)
                if self._create_job(spec, body):
                    created.append(body["metadata"]["name"])
        except DispatchRefused:
            for name in created:
                self._delete_job(spec.namespace, name)
            raise
        return ref

    def _create_job(self, spec: WorkloadSpec, body: dict[str, Any]) -> bool:
        """Create one Job; True if this call created it, False if it was there already."""
        name, namespace = body["metadata"]["name"], spec.namespace
        what = f'create Job "{name}" in namespace "{namespace}"'
        with self._refusals(f"cluster {self.name}: {what}"):
            try:
                self._call(what, self.batch.create_namespaced_job, namespace, body)
                return True
            except k8s.ApiException as error:
                if error.status == 404 and namespace in self._known_namespaces:
                    # The namespace went away since we saw it: make it again, once.
                    self._known_namespaces.discard(namespace)
                    self.ensure_namespace(namespace)
                    self._call(what, self.batch.create_namespaced_job, namespace, body)
                    return True
                if error.status != 409:
                    raise
        return self._adopt_existing(spec, body)

    def _adopt_existing(self, spec: WorkloadSpec, body: dict[str, Any]) -> bool:
        """A Job of that name exists (a retried dispatch): keep it if it is ours."""
        name, namespace = body["metadata"]["name"], spec.namespace
        what = f'read Job "{name}" in namespace "{namespace}"'
        try:
            job = self._call(what, self.batch.read_namespaced_job, name, namespace)
        except k8s.ApiException as error:
            raise self._unexpected(what, error) from error
        owner = (job.metadata.labels or {}).get(LABEL_WORKLOAD_ID)
        if owner != str(spec.workload_id):
            raise DispatchRefused(
                RefusalReason.CONFLICT,
                f'Job "{name}" in namespace "{namespace}" on cluster {self.name} exists and '
                f"belongs to workload {owner or 'none (not created by Allot)'}, "
                f"not {spec.workload_id}",
            )
        wanted = body["spec"]["template"]["spec"]
        current = job.spec.template.spec
        current_selector = dict(current.node_selector or {})
        if job.spec.suspend and current_selector != wanted["nodeSelector"]:
            # A suspended Job from an earlier admission elsewhere in the fleet: its scheduling
            # directives are stale; replace it (it holds no pods while suspended).
            self._delete_job(namespace, name)
            with self._refusals(f"cluster {self.name}: re-create Job {name}"):
                self._call(f"re-create Job {name}", self.batch.create_namespaced_job,
                           namespace, body)
            return True
        return False

    def _delete_job(self, namespace: str, name: str) -> None:
        what = f'delete Job "{name}" in namespace "{namespace}"'
        try:
            self._call(
                what, self.batch.delete_namespaced_job, name, namespace,
                propagation_policy="Background",
            )
        except k8s.ApiException as error:
            if error.status != 404:
                raise self._unexpected(what, error) from error

    def _set_suspend(self, ref: WorkloadRef, suspend: bool) -> None:
        verb = "suspend" if suspend else "start"
        for name in ref.job_names:
            what = f'{verb} Job "{name}" in namespace "{ref.namespace}"'
            try:
                self._call(
                    what, self.batch.patch_namespaced_job, name, ref.namespace,
                    {"spec": {"suspend": suspend}}, _content_type=MERGE_PATCH,
                )
            except k8s.ApiException as error:
                if error.status == 404:
                    if suspend:
                        continue  # gone is as stopped as suspended
                    raise DispatchRefused(
                        RefusalReason.JOB_GONE,
                        f'Job "{name}" in namespace "{ref.namespace}" on cluster {self.name} '
                        "no longer exists",
                    ) from error
                if not suspend and error.status in (400, 403, 422):
                    raise DispatchRefused(
                        RefusalReason.API_ERROR, f"cluster {self.name}: {what}: "
                        f"HTTP {error.status}: {_status_message(error)}",
                    ) from error
                raise self._unexpected(what, error) from error

    def start_workload(self, ref: WorkloadRef) -> None:
        """Unsuspend every Job (`spec.suspend: false`)."""
        self._set_suspend(ref, False)

    def suspend_workload(self, ref: WorkloadRef, grace_s: int) -> None:
        """Suspend every Job; Kubernetes stops the pods with their own grace period, which
        create_workload set from the workload's termination_grace_s (grace_s is the same)."""
        self._set_suspend(ref, True)

    def delete_workload(self, ref: WorkloadRef) -> None:
        """Delete every Job, its pods in the background; missing Jobs are fine."""
        for name in ref.job_names:
            self._delete_job(ref.namespace, name)

    def workload_status(self, ref: WorkloadRef) -> WorkloadStatus:
        """Per pod set: Job spec/conditions, and pod phases from the pods list."""
        return self.workload_statuses([ref])[0]

    def workload_statuses(self, refs: Sequence[WorkloadRef]) -> list[WorkloadStatus]:
        """Statuses of many workloads with two list calls per namespace (Jobs and pods)."""
        by_namespace: dict[str, list[WorkloadRef]] = {}
        for ref in refs:
            by_namespace.setdefault(ref.namespace, []).append(ref)
        jobs: dict[tuple[str, str], Any] = {}
        phases: dict[tuple[str, str], dict[str, int]] = {}
        for namespace, group in by_namespace.items():
            ids = ",".join(sorted({str(r.workload_id) for r in group}))
            selector = f"{LABEL_WORKLOAD_ID} in ({ids})"
            for job in self._list_in(namespace, "Jobs", self.batch.list_namespaced_job, selector):
                jobs[(namespace, job.metadata.name)] = job
            for pod in self._list_in(namespace, "pods", self.core.list_namespaced_pod, selector):
                if pod.metadata.deletion_timestamp is not None:
                    continue  # terminating pods no longer count as running
                labels = pod.metadata.labels or {}
                job_name = next((labels[k] for k in JOB_NAME_LABELS if k in labels), "")
                phase = (pod.status and pod.status.phase) or "Pending"
                counts = phases.setdefault((namespace, job_name), {})
                counts[phase] = counts.get(phase, 0) + 1
        return [
            WorkloadStatus(ref=ref, pod_sets=tuple(
                self._pod_set_status(name, jobs.get((ref.namespace, name)),
                                     phases.get((ref.namespace, name), {}))
                for name in ref.job_names
            ))
            for ref in refs
        ]

    def _list_in(
        self, namespace: str, kind: str, fn: Callable[..., Any], selector: str
    ) -> list[Any]:
        what = f"list {kind} in namespace {namespace}"
        try:
            return list(self._call(what, fn, namespace, label_selector=selector).items)
        except k8s.ApiException as error:
            if error.status == 404:
                return []
            raise self._unexpected(what, error) from error

    @staticmethod
    def _pod_set_status(name: str, job: Any, phases: dict[str, int]) -> PodSetStatus:
        if job is None:
            return PodSetStatus(job_name=name, exists=False)
        status = job.status
        conditions = (status and status.conditions) or []
        failed_condition = next(
            (c for c in conditions if c.type == "Failed" and c.status == "True"), None
        )
        succeeded = max(int((status and status.succeeded) or 0), phases.get("Succeeded", 0))
        failed = max(int((status and status.failed) or 0), phases.get("Failed", 0))
        return PodSetStatus(
            job_name=name,
            exists=True,
            count=int(job.spec.completions or job.spec.parallelism or 1),
            suspended=bool(job.spec.suspend),
            pending=phases.get("Pending", 0),
            running=phases.get("Running", 0),
            succeeded=succeeded,
            failed=failed,
            job_failed=failed_condition is not None,
            message=(
                f"{failed_condition.reason or 'Failed'}: {failed_condition.message or ''}".strip()
                if failed_condition is not None else ""
            ),
        )

    def list_workloads(self) -> list[WorkloadRef]:
        """Every Job Allot made, grouped by namespace and workload."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_WORKLOAD_ID}"
        try:
            jobs = self._call(
                "list Allot Jobs", self.batch.list_job_for_all_namespaces,
                label_selector=selector,
            ).items
        except k8s.ApiException as error:
            raise self._unexpected("list Allot Jobs", error) from error
        grouped: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for job in jobs:
            parsed = parse_job_name(job.metadata.name)
            if parsed is None:
                continue
            workload_id, index = parsed
            grouped.setdefault((job.metadata.namespace, workload_id), []).append(
                (index, job.metadata.name)
            )
        return [
            WorkloadRef(namespace=ns, workload_id=wid,
                        job_names=tuple(name for _, name in sorted(names)))
            for (ns, wid), names in sorted(grouped.items())
        ]

    def watch_workloads(self, *, timeout_s: float, resource_version: str = "") -> WatchResult:
        """Watch Allot's Jobs (their status follows their pods) from the bookmark; return at
        the first change, or empty-handed after `timeout_s`. A 410 (bookmark compacted away)
        comes back as `expired`: resync, then watch from the new bookmark."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_WORKLOAD_ID}"
        if not resource_version:
            try:
                listed = self._call(
                    "list Allot Jobs", self.batch.list_job_for_all_namespaces,
                    label_selector=selector,
                )
            except k8s.ApiException as error:
                raise self._unexpected("list Allot Jobs", error) from error
            ids = {parse_job_name(j.metadata.name) for j in listed.items}
            return WatchResult(
                changed=frozenset(p[0] for p in ids if p is not None),
                resource_version=str(listed.metadata.resource_version or ""),
            )
        watcher = k8s_watch.Watch()
        changed: set[int] = set()
        bookmark = resource_version
        try:
            stream = watcher.stream(
                self.batch.list_job_for_all_namespaces, label_selector=selector,
                resource_version=resource_version, allow_watch_bookmarks=True,
                timeout_seconds=max(1, int(timeout_s)),
                _request_timeout=(self.connect_timeout, timeout_s + self.read_timeout),
            )
            events = self._watch_events(stream)
            for event in events:
                if event["type"] == "ERROR":
                    raw = event.get("raw_object") or {}
                    if raw.get("code") == 410:
                        return WatchResult(frozenset(), "", expired=True)
                    raise BackendError(
                        f"cluster {self.name}: watch Jobs: {raw.get('message', raw)}",
                        status=raw.get("code"),
                    )
                job = event["object"]
                bookmark = str(job.metadata.resource_version or bookmark)
                if event["type"] == "BOOKMARK":
                    continue
                parsed = parse_job_name(job.metadata.name or "")
                if parsed is not None:
                    changed.add(parsed[0])
                    break  # the first change is enough: the caller syncs and watches again
            events.close()  # closes the HTTP response too
        finally:
            watcher.stop()
        return WatchResult(changed=frozenset(changed), resource_version=bookmark)

    def _watch_events(
        self, stream: Iterator[dict[str, Any]]
    ) -> Generator[dict[str, Any], None, None]:
        """The watch stream with transport failures turned into BackendError."""
        try:
            yield from stream
        except k8s.ApiException as error:
            if error.status == 410:
                yield {"type": "ERROR", "raw_object": {"code": 410}}
                return
            raise self._unexpected("watch Jobs", error) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendError(f"cluster {self.name}: watch Jobs: {error}") from error

    # -------------------------------------------------------------- events
    def post_event(
        self, ref: WorkloadRef, type: ClusterEventType | str, reason: str, message: str
    ) -> None:
        """An events.k8s.io/v1 Event regarding each existing Job of the workload."""
        event_type = ClusterEventType(type)
        now = datetime.now(UTC)
        instance = str(self.connection.get("instance") or f"allot-{socket.gethostname()}")[:128]
        for name in ref.job_names:
            what = f'read Job "{name}" in namespace "{ref.namespace}"'
            try:
                job = self._call(what, self.batch.read_namespaced_job, name, ref.namespace)
            except k8s.ApiException as error:
                if error.status == 404:
                    continue  # nothing left to describe
                raise self._unexpected(what, error) from error
            body = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {
                    # client-go names events <object>.<hex nanoseconds>; the random tail
                    # keeps two reasons posted in the same instant apart.
                    "name": f"{name}.{time.time_ns():x}{secrets.token_hex(2)}",
                    "namespace": ref.namespace,
                },
                "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": instance,
                "action": reason[:128],
                "reason": reason[:128],
                "type": event_type.value,
                "note": message[:1024],
                "regarding": {
                    "apiVersion": "batch/v1", "kind": "Job", "name": name,
                    "namespace": ref.namespace, "uid": job.metadata.uid,
                },
            }
            what = f'post event {reason} on Job "{name}"'
            try:
                self._call(what, self.events.create_namespaced_event, ref.namespace, body)
            except k8s.ApiException as error:
                raise self._unexpected(what, error) from error

    # -------------------------------------------------------------- priority classes
    def sync_priority_classes(self, classes: Sequence[PriorityClassSpec]) -> None:
        """Create missing classes, patch descriptions, replace those whose value changed
        (the API forbids changing `value` and `preemptionPolicy` in place)."""
        try:
            existing = {
                pc.metadata.name: pc
                for pc in self._call(
                    "list PriorityClasses", self.scheduling.list_priority_class
                ).items
            }
        except k8s.ApiException as error:
            raise self._unexpected("list PriorityClasses", error) from error
        for wanted in classes:
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": wanted.name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
                "value": int(wanted.value),
                "description": wanted.description,
                "preemptionPolicy": wanted.preemption_policy,
                "globalDefault": False,
            }
            current = existing.get(wanted.name)
            what = f'PriorityClass "{wanted.name}"'
            try:
                if current is None:
                    self._create_priority_class(body)
                elif (current.value != wanted.value
                      or (current.preemption_policy or "PreemptLowerPriority")
                      != wanted.preemption_policy):
                    self._call(f"delete {what}", self.scheduling.delete_priority_class,
                               wanted.name)
                    self._create_priority_class(body)
                elif (current.description or "") != wanted.description:
                    self._call(
                        f"patch {what}", self.scheduling.patch_priority_class, wanted.name,
                        {"description": wanted.description}, _content_type=MERGE_PATCH,
                    )
            except k8s.ApiException as error:
                raise self._unexpected(f"sync {what}", error) from error
            self._known_priority_classes.add(wanted.name)

    def _create_priority_class(self, body: dict[str, Any]) -> None:
        try:
            self._call(
                f'create PriorityClass "{body["metadata"]["name"]}"',
                self.scheduling.create_priority_class, body,
            )
        except k8s.ApiException as error:
            if error.status != 409:  # made meanwhile by another worker: fine
                raise
