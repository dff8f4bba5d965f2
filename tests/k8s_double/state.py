"""The Kubernetes API double's state: its objects, the faults to inject, the Jobs' change log.

Only what Allot's Kubernetes backend touches, with the validation and defaults the real API
server applies to it (422 for invalid objects, 409 for duplicates, immutable fields), so a test
that passes here exercises the same answers a real cluster gives. The Job controller
(controller.py), patches (patches.py) and the error answers (errors.py) are beside it.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from tests.k8s_double.controller import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    JobController,
    now_iso,
)
from tests.k8s_double.errors import already_exists, forbidden_create, invalid, not_found
from tests.k8s_double.kinds import KindsController
from tests.k8s_double.patches import apply_patch

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


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


class _LoggedPods(dict):
    """The pods, each addition and deletion recorded for pod watches (phase changes are
    recorded where they are made)."""

    def __init__(self, record: Any, admit: Any = None):
        super().__init__()
        self._record = record
        self._admit = admit

    def __setitem__(self, key: Any, pod: dict) -> None:
        event = "MODIFIED" if key in self else "ADDED"
        if event == "ADDED" and self._admit is not None:
            self._admit(pod)  # the API server's mutating webhooks, on CREATE
        super().__setitem__(key, pod)
        self._record(event, pod)

    def __delitem__(self, key: Any) -> None:
        pod = self[key]
        super().__delitem__(key)
        self._record("DELETED", pod)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            pod = super().pop(key)
            self._record("DELETED", pod)
            return pod
        return super().pop(key, *default)


class ClusterState(JobController, KindsController):
    """Every object of the double, keyed by resource, namespace and name; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, dict] = {}
        self.namespaces: dict[str, dict] = {}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = _LoggedPods(self.record_pod, self.admit_pod)
        # Mutating admission webhooks for pods: (label key the object selector asks for, a
        # callable taking an AdmissionReview and returning its answer), called on each new pod.
        self.pod_webhooks: list[tuple[str, Any]] = []
        self.events: list[dict] = []
        self.priority_classes: dict[str, dict] = {}
        self.objects: dict[tuple[str, str, str], dict] = {}  # custom objects (kinds.py)
        self.unserved: set[str] = set()  # group versions the API does not serve
        self.faults: list[Fault] = []
        self.forbidden_namespaces: set[str] = set()
        self.requests: list[dict] = []  # method, path, query, content_type, body
        self._version = 1000
        # Watch support: every Job change, in resourceVersion order; older ones are compacted.
        self.changed = threading.Condition(self.lock)
        self.job_log: list[tuple[int, str, dict]] = []  # (resourceVersion, type, Job copy)
        self.pod_log: list[tuple[int, str, dict]] = []  # the same for pods
        self.compacted_before = 0

    def admit_pod(self, pod: dict) -> None:
        """Send a new pod to each pod webhook whose object selector (a label that exists)
        matches, and apply the JSON patch it answers (`add`/`replace` of a map member)."""
        for label, webhook in self.pod_webhooks:
            if label not in (pod["metadata"].get("labels") or {}):
                continue
            answer = webhook({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "request": {"uid": str(uuid.uuid4()), "operation": "CREATE",
                                          "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                          "namespace": pod["metadata"].get("namespace"),
                                          "object": copy.deepcopy(pod)}})
            response = answer["response"]
            if not response.get("allowed"):
                raise ValueError(f"pod refused by a webhook: {response.get('status')}")
            for op in json.loads(base64.b64decode(response["patch"])) if response.get(
                    "patch") else []:
                *parents, last = [part.replace("~1", "/").replace("~0", "~")
                                  for part in op["path"].split("/")[1:]]
                target = pod
                for part in parents:
                    target = target.setdefault(part, {})
                target[last] = op["value"]

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

    def record_pod(self, event_type: str, pod: dict) -> None:
        """A pod was added, changed or deleted: a new resourceVersion, the watchers told."""
        with self.lock:
            pod["metadata"]["resourceVersion"] = self.next_version()
            self.pod_log.append((self._version, event_type, copy.deepcopy(pod)))
            self.changed.notify_all()

    def compact(self) -> None:
        """Forget the change log, as etcd compaction does: older bookmarks now get 410."""
        with self.lock:
            self.compacted_before = self._version + 1
            self.job_log.clear()
            self.pod_log.clear()

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
