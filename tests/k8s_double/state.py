"""The Kubernetes API double's state: objects, a tiny Job controller, patches, label selectors.

Only what Allot's Kubernetes backend touches, with the validation and defaults the real API
server applies to it (422 for invalid objects, 409 for duplicates, immutable fields), so a test
that passes here exercises the same answers a real cluster gives.
"""

from __future__ import annotations

import copy
import re
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An answer other than 2xx, rendered as a `kind: Status` object."""

    REASONS = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "AlreadyExists",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }

    def __init__(
        self, code: int, message: str, *, reason: str | None = None, details: dict | None = None
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.details = details or {}

    def status_object(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        404, f'{qualified} "{name}" not found',
        details={"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409, f'{qualified} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource},
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> ApiError:
    """A 422 worded like the API server's: `Job.batch "x" is invalid: field: message`."""
    qualified = f"{kind}.{group}" if group else kind
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(
        422, f'{qualified} "{name}" is invalid: {text}',
        details={
            "name": name, "group": group, "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
            ],
        },
    )


# ---------------------------------------------------------------- label selectors

_SET_EXPR = re.compile(r"^\s*(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality- and set-based label selectors, as `?labelSelector=` accepts them."""
    if not selector:
        return True
    for term in _split_selector(selector):
        set_match = _SET_EXPR.match(term)
        if set_match:
            values = {v.strip() for v in set_match["values"].split(",") if v.strip()}
            present = labels.get(set_match["key"])
            if set_match["op"] == "in" and present not in values:
                return False
            if set_match["op"] == "notin" and present in values:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


# ---------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch, the part built-in types use: lists of named objects (containers,
    env, volumes) merge by `name`; `$patch: replace|delete` on maps; other lists replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and _named_list(value) and _named_list(result.get(key)):
            merged = {item["name"]: copy.deepcopy(item) for item in result.get(key) or []}
            order = [item["name"] for item in result.get(key) or []]
            for item in value:
                if item.get("$patch") == "delete":
                    merged.pop(item["name"], None)
                    continue
                if item["name"] not in merged:
                    order.append(item["name"])
                merged[item["name"]] = strategic_merge_patch(merged.get(item["name"]), item)
            result[key] = [merged[name] for name in order if name in merged]
        else:
            merged_value = strategic_merge_patch(result.get(key), value)
            if merged_value is None:
                result.pop(key, None)
            else:
                result[key] = merged_value
    return result


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(target: dict, operations: list) -> dict:
    """RFC 6902 JSON patch (add, replace, remove, test) on maps and lists."""
    doc = copy.deepcopy(target)
    for op in operations:
        parts = _pointer(op["path"])
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        kind = op["op"]
        if kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op["value"]))
                else:
                    parent[index] = copy.deepcopy(op["value"])
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, f"the server rejected our request: path {op['path']} "
                                   "does not exist")
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last, None)
        elif kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, f"the server rejected our request: test failed at {op['path']}")
        else:
            raise ApiError(400, f"unsupported JSON patch operation {kind!r}")
    return doc


# ---------------------------------------------------------------- faults


@dataclass
class Fault:
    """Answer the next `times` matching calls with `status` (and/or after `delay_s`)."""

    method: str  # "*" for any
    path: str  # a regular expression matched against the path (without the query)
    status: int | None = None  # None: no error, only the delay
    message: str = ""
    times: int = 1
    delay_s: float = 0.0
    apply: bool = True  # with only a delay: still perform the call after sleeping
    after: int = 0  # let this many matching calls through first

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and re.search(self.path, path) is not None


# ---------------------------------------------------------------- the store


class ClusterState:
    """Every object of the double, keyed by resource, namespace and name; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, dict] = {}
        self.namespaces: dict[str, dict] = {}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.events: list[dict] = []
        self.priority_classes: dict[str, dict] = {}
        self.faults: list[Fault] = []
        self.forbidden_namespaces: set[str] = set()
        self.requests: list[dict] = []  # method, path, query, content_type, body
        self._version = 1000
        # Watch support: every Job change, in resourceVersion order; older ones are compacted.
        self.changed = threading.Condition(self.lock)
        self.job_log: list[tuple[int, str, dict]] = []  # (resourceVersion, type, Job copy)
        self.compacted_before = 0

    # -------------------------------------------------------------- helpers
    def next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def record_job(self, event_type: str, job: dict) -> None:
        """A Job changed: give it a new resourceVersion and tell the watchers."""
        with self.lock:
            job["metadata"]["resourceVersion"] = self.next_version()
            self.job_log.append((self._version, event_type, copy.deepcopy(job)))
            self.changed.notify_all()

    def compact(self) -> None:
        """Forget the change log, as etcd compaction does: older bookmarks now get 410."""
        with self.lock:
            self.compacted_before = self._version + 1
            self.job_log.clear()

    def new_meta(self, meta: dict, namespace: str | None = None) -> dict:
        meta = copy.deepcopy(meta or {})
        if namespace is not None:
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["resourceVersion"] = self.next_version()
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        return meta

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.matches(method, path):
                    if fault.after > 0:
                        fault.after -= 1
                        continue
                    fault.times -= 1
                    return fault
            return None

    # -------------------------------------------------------------- nodes
    def add_node(
        self, name: str, *, labels: dict[str, str] | None = None, gpus: int = 8,
        cpu: str = "96", memory: str = "1024Gi", ready: bool = True,
        unschedulable: bool = False,
    ) -> dict:
        """Register a node with allocatable resources and a Ready condition."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": self.new_meta({
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            }),
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus),
                             "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus),
                                "pods": "110"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False",
                     "reason": "KubeletHasSufficientMemory"},
                    {"type": "Ready", "status": "True" if ready else "False",
                     "reason": "KubeletReady" if ready else "KubeletNotReady",
                     "lastTransitionTime": now_iso()},
                ],
            },
        }
        with self.lock:
            self.nodes[name] = node
        return node

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self.lock:
            for condition in self.nodes[name]["status"]["conditions"]:
                if condition["type"] == "Ready":
                    condition["status"] = "True" if ready else "False"

    # -------------------------------------------------------------- namespaces
    def create_namespace(self, body: dict) -> dict:
        name = (body.get("metadata") or {}).get("name", "")
        with self.lock:
            if name in self.forbidden_namespaces:
                raise forbidden_create("namespaces", name)
            if not DNS1123_LABEL.match(name) or len(name) > 63:
                raise invalid("Namespace", name, [(
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower '
                    "case alphanumeric characters or '-', and must start and end with an "
                    "alphanumeric character",
                )])
            if name in self.namespaces:
                raise already_exists("namespaces", name)
            namespace = {
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": self.new_meta(body.get("metadata") or {}),
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            namespace["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            self.namespaces[name] = namespace
            return namespace

    # -------------------------------------------------------------- jobs
    def validate_job(self, job: dict, name: str) -> None:
        causes: list[tuple[str, str]] = []
        if not name:
            causes.append(("metadata.name", "Required value: name or generateName is required"))
        elif not DNS1123_LABEL.match(name) or len(name) > 63:
            causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 '
                           "label must consist of lower case alphanumeric characters or '-'"))
        spec = job.get("spec") or {}
        for field in ("parallelism", "completions", "backoffLimit"):
            value = spec.get(field)
            if value is not None and (not isinstance(value, int) or value < 0):
                causes.append((f"spec.{field}", f"Invalid value: {value}: must be greater than "
                               "or equal to 0"))
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        containers = pod_spec.get("containers") or []
        if not containers:
            causes.append(("spec.template.spec.containers", "Required value"))
        for i, container in enumerate(containers):
            if not container.get("name"):
                causes.append((f"spec.template.spec.containers[{i}].name", "Required value"))
            if not container.get("image"):
                causes.append((f"spec.template.spec.containers[{i}].image", "Required value"))
            resources = container.get("resources") or {}
            limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
            gpu_request = requests.get("nvidia.com/gpu")
            if gpu_request is not None and gpu_request != limits.get("nvidia.com/gpu"):
                causes.append((
                    f"spec.template.spec.containers[{i}].resources.requests",
                    f'Invalid value: "{gpu_request}": must be equal to nvidia.com/gpu limit',
                ))
        restart = pod_spec.get("restartPolicy")
        if restart not in ("Never", "OnFailure"):
            causes.append(("spec.template.spec.restartPolicy",
                           f'Unsupported value: "{restart}": supported values: "OnFailure", '
                           '"Never"'))
        grace = pod_spec.get("terminationGracePeriodSeconds")
        if grace is not None and (not isinstance(grace, int) or grace < 0):
            causes.append(("spec.template.spec.terminationGracePeriodSeconds",
                           f"Invalid value: {grace}: must be greater than or equal to 0"))
        if causes:
            raise invalid("Job", name, causes, group="batch")

    def create_job(self, namespace: str, body: dict) -> dict:
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        with self.lock:
            if namespace in self.forbidden_namespaces:
                raise forbidden_create("jobs", name, namespace, group="batch")
            if namespace not in self.namespaces:
                raise not_found("namespaces", namespace)
            self.validate_job(body, name)
            if (namespace, name) in self.jobs:
                raise already_exists("jobs", name, group="batch")
            job = copy.deepcopy(body)
            job["apiVersion"], job["kind"] = "batch/v1", "Job"
            job["metadata"] = self.new_meta(meta, namespace)
            uid = job["metadata"]["uid"]
            spec = job.setdefault("spec", {})
            spec.setdefault("parallelism", 1)
            spec.setdefault("completions", spec["parallelism"])
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("suspend", False)
            spec.setdefault("completionMode", "NonIndexed")
            spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
            template_labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
            template_labels.update({
                CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name,
                "controller-uid": uid, "job-name": name,
            })
            job["status"] = {}
            self.jobs[(namespace, name)] = job
            self.reconcile_job(job)
            self.record_job("ADDED", job)
            return job

    def get_job(self, namespace: str, name: str) -> dict:
        with self.lock:
            job = self.jobs.get((namespace, name))
            if job is None:
                raise not_found("jobs", name, "batch")
            return job

    def patch_job(self, namespace: str, name: str, patch: Any, content_type: str) -> dict:
        with self.lock:
            job = self.get_job(namespace, name)
            patched = apply_patch(job, patch, content_type)
            old_spec, new_spec = job["spec"], patched.get("spec") or {}
            causes = []
            for field in ("completions", "selector", "completionMode"):
                if new_spec.get(field) != old_spec.get(field):
                    causes.append((f"spec.{field}", "Invalid value: field is immutable"))
            template_changed = new_spec.get("template") != old_spec.get("template")
            if template_changed and not old_spec.get("suspend"):
                causes.append(("spec.template", "Invalid value: field is immutable"))
            if causes:
                raise invalid("Job", name, causes, group="batch")
            self.validate_job(patched, name)
            patched["metadata"]["resourceVersion"] = self.next_version()
            if new_spec != old_spec:
                patched["metadata"]["generation"] = job["metadata"].get("generation", 1) + 1
            patched["status"] = job["status"]
            self.jobs[(namespace, name)] = patched
            self.reconcile_job(patched)
            self.record_job("MODIFIED", patched)
            return patched

    def delete_job(self, namespace: str, name: str, propagation: str | None) -> dict:
        with self.lock:
            job = self.get_job(namespace, name)
            del self.jobs[(namespace, name)]
            self.record_job("DELETED", job)
            # Background and Foreground both remove the pods; Orphan leaves them.
            if propagation != "Orphan":
                for key in [k for k, p in self.pods.items() if self._pod_of(p, job)]:
                    del self.pods[key]
            return {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "batch", "kind": "jobs",
                            "uid": job["metadata"]["uid"]},
            }

    @staticmethod
    def _pod_of(pod: dict, job: dict) -> bool:
        return pod["metadata"]["labels"].get(CONTROLLER_UID_LABEL) == job["metadata"]["uid"]

    def job_pods(self, job: dict) -> list[dict]:
        with self.lock:
            return [p for p in self.pods.values() if self._pod_of(p, job)]

    def reconcile_job(self, job: dict) -> None:
        """The Job controller, in one synchronous step: suspended Jobs hold no pods; running
        Jobs hold `parallelism` pods (Pending until a test moves them with set_pod_phases)."""
        namespace = job["metadata"]["namespace"]
        spec, status = job["spec"], job["status"]
        conditions = [c for c in status.get("conditions", []) if c["type"] != "Suspended"]
        if any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions):
            status["conditions"] = conditions
            return
        pods = self.job_pods(job)
        if spec.get("suspend"):
            for pod in pods:
                if pod["status"]["phase"] in ("Pending", "Running"):
                    del self.pods[(namespace, pod["metadata"]["name"])]
            conditions.append({
                "type": "Suspended", "status": "True", "reason": "JobSuspended",
                "message": "Job suspended", "lastTransitionTime": now_iso(),
            })
        else:
            status.setdefault("startTime", now_iso())
            if any(c.get("type") == "Suspended" for c in status.get("conditions", [])):
                conditions.append({
                    "type": "Suspended", "status": "False", "reason": "JobResumed",
                    "message": "Job resumed", "lastTransitionTime": now_iso(),
                })
            live = [p for p in pods if p["status"]["phase"] in ("Pending", "Running")]
            succeeded = sum(1 for p in pods if p["status"]["phase"] == "Succeeded")
            wanted = min(spec["parallelism"], spec["completions"] - succeeded) - len(live)
            priority = spec["template"]["spec"].get("priorityClassName")
            if wanted > 0 and priority and priority not in self.priority_classes:
                # The Priority admission plugin refuses the pods, not the Job: the Job
                # controller reports FailedCreate and the Job waits with no pods.
                self.events.append({
                    "apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": self.new_meta({"name": f"{job['metadata']['name']}.failed"},
                                              namespace),
                    "type": "Warning", "reason": "FailedCreate",
                    "reportingController": "job-controller",
                    "note": f'Error creating: pods "{job["metadata"]["name"]}-" is forbidden: '
                            f"no PriorityClass with name {priority} was found",
                    "regarding": {"apiVersion": "batch/v1", "kind": "Job",
                                  "name": job["metadata"]["name"], "namespace": namespace,
                                  "uid": job["metadata"]["uid"]},
                })
                wanted = 0
            for _ in range(max(0, wanted)):
                self._create_pod(job)
        status["conditions"] = conditions
        self.update_job_status(job)

    def _create_pod(self, job: dict) -> dict:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        template = job["spec"]["template"]
        pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": self.new_meta({
                "name": pod_name,
                "labels": copy.deepcopy(template["metadata"]["labels"]),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                     "uid": job["metadata"]["uid"], "controller": True}],
            }, namespace),
            "spec": copy.deepcopy(template["spec"]),
            "status": {"phase": "Pending"},
        }
        self.pods[(namespace, pod_name)] = pod
        return pod

    def update_job_status(self, job: dict) -> None:
        pods = self.job_pods(job)
        status = job["status"]
        phases = [p["status"]["phase"] for p in pods]
        status["active"] = sum(1 for p in phases if p in ("Pending", "Running"))
        status["ready"] = sum(1 for p in phases if p == "Running")
        status["succeeded"] = sum(1 for p in phases if p == "Succeeded")
        status["failed"] = sum(1 for p in phases if p == "Failed")
        for key in ("active", "succeeded", "failed"):
            if not status[key]:
                status.pop(key)
        conditions = status.setdefault("conditions", [])
        done = {c["type"] for c in conditions if c["status"] == "True"}
        if status.get("succeeded", 0) >= job["spec"]["completions"] and "Complete" not in done:
            conditions.append({"type": "Complete", "status": "True", "lastTransitionTime":
                               now_iso()})
            status["completionTime"] = now_iso()
        if status.get("failed", 0) > job["spec"]["backoffLimit"] and "Failed" not in done:
            conditions.append({
                "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": now_iso(),
            })

    def set_pod_phases(self, namespace: str, job_name: str, phase: str, count: int | None = None,
                       *, node: str = "") -> int:
        """Move up to `count` (None = all) live pods of a Job to `phase`; returns how many."""
        with self.lock:
            job = self.get_job(namespace, job_name)
            moved = 0
            for pod in sorted(self.job_pods(job), key=lambda p: p["metadata"]["name"]):
                if count is not None and moved >= count:
                    break
                if pod["status"]["phase"] in ("Succeeded", "Failed") or pod["status"][
                    "phase"
                ] == phase:
                    continue
                pod["status"]["phase"] = phase
                if node:
                    pod["spec"]["nodeName"] = node
                moved += 1
            self.update_job_status(job)
            if phase == "Failed" and not job["spec"].get("suspend"):
                self.reconcile_job(job)  # the controller replaces failed pods until backoff
            if moved:
                self.record_job("MODIFIED", job)
            return moved

    # -------------------------------------------------------------- events
    def create_event(self, namespace: str, body: dict) -> dict:
        meta = body.get("metadata") or {}
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = meta["generateName"] + uuid.uuid4().hex[:5]
        causes: list[tuple[str, str]] = []
        if not body.get("eventTime"):
            causes.append(("eventTime", "Required value"))
        for field in ("reportingController", "reportingInstance", "action", "reason"):
            if not body.get(field):
                causes.append((field, "Required value"))
        if body.get("type") not in ("Normal", "Warning"):
            causes.append(("type", f'Unsupported value: "{body.get("type")}": supported values: '
                           '"Normal", "Warning"'))
        if len(body.get("note") or "") > 1024:
            causes.append(("note", "Invalid value: can have at most 1024 characters"))
        if len(body.get("reason") or "") > 128:
            causes.append(("reason", "Invalid value: can have at most 128 characters"))
        regarding = body.get("regarding") or {}
        if regarding.get("namespace") and regarding["namespace"] != namespace:
            causes.append(("regarding.namespace", "Invalid value: does not match event.namespace"))
        if causes:
            raise invalid("Event", name, causes, group="events.k8s.io")
        with self.lock:
            if namespace not in self.namespaces:
                raise not_found("namespaces", namespace)
            if any(e["metadata"]["namespace"] == namespace and e["metadata"]["name"] == name
                   for e in self.events):
                raise already_exists("events", name, "events.k8s.io")
            event = copy.deepcopy(body)
            event["apiVersion"], event["kind"] = "events.k8s.io/v1", "Event"
            event["metadata"] = self.new_meta({**meta, "name": name}, namespace)
            self.events.append(event)
            return event

    def events_about(self, namespace: str, kind: str, name: str) -> list[dict]:
        """What `kubectl describe <kind> <name>` lists under Events."""
        with self.lock:
            return [
                e for e in self.events
                if e["metadata"]["namespace"] == namespace
                and (e.get("regarding") or {}).get("kind") == kind
                and (e.get("regarding") or {}).get("name") == name
            ]

    # -------------------------------------------------------------- priority classes
    def create_priority_class(self, body: dict) -> dict:
        name = (body.get("metadata") or {}).get("name", "")
        causes = []
        if not DNS1123_SUBDOMAIN.match(name or "-"):
            causes.append(("metadata.name", f'Invalid value: "{name}"'))
        if not isinstance(body.get("value"), int):
            causes.append(("value", "Required value"))
        elif body["value"] > 1_000_000_000:
            causes.append(("value", "Invalid value: must be no greater than 1000000000"))
        policy = body.get("preemptionPolicy", "PreemptLowerPriority")
        if policy not in ("PreemptLowerPriority", "Never"):
            causes.append(("preemptionPolicy", f'Unsupported value: "{policy}"'))
        if causes:
            raise invalid("PriorityClass", name, causes, group="scheduling.k8s.io")
        with self.lock:
            if name in self.priority_classes:
                raise already_exists("priorityclasses", name, "scheduling.k8s.io")
            pc = copy.deepcopy(body)
            pc["apiVersion"], pc["kind"] = "scheduling.k8s.io/v1", "PriorityClass"
            pc["metadata"] = self.new_meta(body.get("metadata") or {})
            pc["preemptionPolicy"] = policy
            pc.setdefault("globalDefault", False)
            self.priority_classes[name] = pc
            return pc

    def patch_priority_class(self, name: str, patch: Any, content_type: str) -> dict:
        with self.lock:
            pc = self.priority_classes.get(name)
            if pc is None:
                raise not_found("priorityclasses", name, "scheduling.k8s.io")
            patched = apply_patch(pc, patch, content_type)
            causes = []
            if patched.get("value") != pc.get("value"):
                causes.append(("value", "Forbidden: may not be changed in an update."))
            if patched.get("preemptionPolicy") != pc.get("preemptionPolicy"):
                causes.append(("preemptionPolicy", "Invalid value: field is immutable"))
            if causes:
                raise invalid("PriorityClass", name, causes, group="scheduling.k8s.io")
            patched["metadata"]["resourceVersion"] = self.next_version()
            self.priority_classes[name] = patched
            return patched


def forbidden_create(resource: str, name: str, namespace: str = "", group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return ApiError(
        403,
        f'{qualified} "{name}" is forbidden: User "system:serviceaccount:allot:allot" cannot '
        f'create resource "{resource}" in API group "{group}"{where}',
        details={"name": name, "group": group, "kind": resource},
    )


def apply_patch(obj: dict, patch: Any, content_type: str) -> dict:
    base = content_type.split(";")[0].strip()
    if base == "application/merge-patch+json":
        return merge_patch(obj, patch)
    if base == "application/strategic-merge-patch+json":
        return strategic_merge_patch(obj, patch)
    if base == "application/json-patch+json":
        if not isinstance(patch, list):
            raise ApiError(400, "json patch must be a list of operations")
        return json_patch(obj, patch)
    raise ApiError(415, f'the body of the request was in an unknown format - accepted media '
                   f'types include: application/json-patch+json, application/merge-patch+json, '
                   f'application/strategic-merge-patch+json (got "{content_type}")')
