"""The API double's workload kinds beyond batch/v1 Job: the custom resources' paths (any
group, version and plural of scheduling.kinds, as the custom objects API calls them), API
discovery (`GET /apis`, with group versions a test may take away), and a tiny controller per
kind, in one synchronous step per change:

- a suspended object (its own suspend field) holds no pods and reports Suspended in its own
  vocabulary; an unsuspended one holds its pod sets' pods (Pending until a test moves them);
- an object without a suspend field always holds its pods, made from its current templates
  (gated or not); pods made from an older template are replaced, as a rollout does;
- once every pod of every pod set has succeeded the object reports success, a failed pod
  reports failure, each in the kind's own shape (conditions, jobDeploymentStatus, state.phase).

The pod sets of an object are found with scheduling.kinds' derivation (tested on its own);
the controller's behaviour and status shapes are the double's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from typing import Any

from scheduling import kinds
from scheduling.kinds.base import get
from tests.k8s_double.errors import ApiError, already_exists, forbidden_create, invalid, not_found
from tests.k8s_double.patches import apply_patch

# The labels the LeaderWorkerSet controller puts on each pod of a group.
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"

BUILT_IN = ("v1", "batch/v1", "apps/v1", "events.k8s.io/v1", "scheduling.k8s.io/v1")
TEMPLATE_HASH = "double.allot.io/template-hash"
# Kinds whose controller replaces pods of an older template itself (a rollout); the others
# (a StatefulSet stuck on pods that never get ready, a Volcano Job) keep them until deleted.
ROLLING = ("Deployment", "LeaderWorkerSet")
# Kinds whose controller deletes pods past `spec.replicas` (a scale-down).
SCALING = ("Deployment", "StatefulSet", "LeaderWorkerSet")


def _hash(template: dict) -> str:
    return hashlib.sha1(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


class KindsController:
    """The custom objects' part of ClusterState (its lock, pods, namespaces, helpers)."""

    lock: threading.RLock
    pods: dict[tuple[str, str], dict]
    namespaces: dict[str, dict]
    forbidden_namespaces: set[str]
    objects: dict[tuple[str, str, str], dict]  # (group/plural, namespace, name) -> object
    unserved: set[str]  # group versions taken out of the API (operator not installed)

    def new_meta(self, meta: dict, namespace: str | None = None) -> dict: ...

    def next_version(self) -> str: ...

    def record_pod(self, event_type: str, pod: dict) -> None: ...

    # ------------------------------------------------------------ discovery
    def api_groups(self) -> dict:
        versions = {*BUILT_IN, *(k.api_version for k in kinds.KINDS.values())} - self.unserved
        groups: dict[str, list[str]] = {}
        for gv in sorted(versions):
            if "/" in gv:
                group, version = gv.split("/")
                groups.setdefault(group, []).append(version)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in groups.items()]}

    def kind_at(self, group: str, version: str, plural: str) -> kinds.Kind:
        api_version = f"{group}/{version}"
        if api_version in self.unserved:
            raise ApiError(404, "the server could not find the requested resource")
        for k in kinds.KINDS.values():
            if k.api_version == api_version and k.plural == plural:
                return k
        raise ApiError(404, "the server could not find the requested resource")

    # ------------------------------------------------------------ objects
    def create_object(self, group: str, version: str, plural: str, namespace: str,
                      body: dict) -> dict:
        kind = self.kind_at(group, version, plural)
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        with self.lock:
            if namespace in self.forbidden_namespaces:
                raise forbidden_create(plural, name, namespace, group=group)
            if namespace not in self.namespaces:
                raise not_found("namespaces", namespace)
            if body.get("kind") != kind.kind or body.get("apiVersion") != kind.api_version:
                raise ApiError(400, f"the API version in the data ({body.get('apiVersion')}) "
                               f"does not match the expected API version ({kind.api_version})")
            try:
                kind.derive(copy.deepcopy(body))
            except kinds.ManifestError as exc:
                raise invalid(kind.kind, name, [(exc.path, exc.problem)], group=group) from exc
            key = (f"{group}/{plural}", namespace, name)
            if key in self.objects:
                raise already_exists(plural, name, group=group)
            obj = copy.deepcopy(body)
            obj["metadata"] = self.new_meta(meta, namespace)
            obj["status"] = {}
            self.objects[key] = obj
            self.reconcile_object(kind, obj)
            return obj

    def get_object(self, group: str, version: str, plural: str, namespace: str,
                   name: str) -> dict:
        self.kind_at(group, version, plural)
        with self.lock:
            obj = self.objects.get((f"{group}/{plural}", namespace, name))
            if obj is None:
                raise not_found(plural, name, group)
            return obj

    def list_objects(self, group: str, version: str, plural: str,
                     namespace: str | None) -> list[dict]:
        """The objects of a kind in `namespace` (None: in every namespace)."""
        self.kind_at(group, version, plural)
        with self.lock:
            return [o for (gp, ns, _), o in self.objects.items()
                    if gp == f"{group}/{plural}" and namespace in (None, ns)]

    def patch_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                     patch: Any, content_type: str) -> dict:
        kind = self.kind_at(group, version, plural)
        with self.lock:
            obj = self.get_object(group, version, plural, namespace, name)
            patched = apply_patch(copy.deepcopy(obj), patch, content_type)
            return self._store(kind, group, plural, namespace, name, patched)

    def replace_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                       body: dict) -> dict:
        kind = self.kind_at(group, version, plural)
        with self.lock:
            obj = self.get_object(group, version, plural, namespace, name)
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent and sent != obj["metadata"]["resourceVersion"]:
                raise ApiError(409, f'Operation cannot be fulfilled on {plural}.{group} '
                               f'"{name}": the object has been modified; please apply your '
                               "changes to the latest version and try again", reason="Conflict")
            replaced = copy.deepcopy(body)
            replaced["status"] = obj.get("status", {})
            return self._store(kind, group, plural, namespace, name, replaced)

    def _store(self, kind: kinds.Kind, group: str, plural: str, namespace: str, name: str,
               obj: dict) -> dict:
        old = self.objects[(f"{group}/{plural}", namespace, name)]
        meta = {**old["metadata"], **{k: v for k, v in (obj.get("metadata") or {}).items()
                                      if k in ("labels", "annotations")}}
        meta["resourceVersion"] = self.next_version()
        if obj.get("spec") != old.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        obj["metadata"] = meta
        self.objects[(f"{group}/{plural}", namespace, name)] = obj
        self.reconcile_object(kind, obj)
        return obj

    def delete_object(self, group: str, version: str, plural: str, namespace: str,
                      name: str) -> dict:
        self.kind_at(group, version, plural)
        with self.lock:
            obj = self.objects.pop((f"{group}/{plural}", namespace, name), None)
            if obj is None:
                raise not_found(plural, name, group)
            for pod in self.object_pods(obj):
                del self.pods[(namespace, pod["metadata"]["name"])]
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "group": group, "kind": plural,
                                "uid": obj["metadata"]["uid"]}}

    # ------------------------------------------------------------ the controller
    def object_pods(self, obj: dict) -> list[dict]:
        uid = obj["metadata"]["uid"]
        return [p for p in self.pods.values()
                if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences", []))]

    @staticmethod
    def _templates(kind: kinds.Kind, obj: dict) -> list[tuple[int, dict]]:
        """(count, pod template) per pod set, as the kind's operator would make them."""
        out = []
        for ps in kind.derive(obj):
            template = ps.template
            if kind.kind == "TrainJob":  # the runtime's template, patched by the managers
                template = copy.deepcopy(template)
                for patch in get(obj, "spec.runtimePatches") or []:
                    for rj in get(patch, "trainingRuntimeSpec.template.spec.replicatedJobs") or []:
                        pod = get(rj, "template.spec.template") or {}
                        template.setdefault("metadata", {}).update(pod.get("metadata") or {})
                        template.setdefault("spec", {}).update(pod.get("spec") or {})
            out.append((ps.count, template))
        return out

    def reconcile_object(self, kind: kinds.Kind, obj: dict) -> None:
        namespace = obj["metadata"]["namespace"]
        status = obj.setdefault("status", {})
        pods = self.object_pods(obj)
        if self._finished(kind, obj):
            return
        if kind.suspend_path and get(obj, kind.suspend_path):
            for pod in pods:
                if pod["status"]["phase"] in ("Pending", "Running"):
                    del self.pods[(namespace, pod["metadata"]["name"])]
            self._report(kind, obj, "Suspended")
            return
        if kind.kind == "LeaderWorkerSet":
            self._reconcile_groups(kind, obj)
            status.pop("suspendedAt", None)
            self._report(kind, obj, "Running")
            return
        for index, (count, template) in enumerate(self._templates(kind, obj)):
            digest = _hash(template)
            mine = [p for p in self.object_pods(obj)
                    if p["metadata"]["annotations"].get("double.allot.io/pod-set") == str(index)]
            for pod in mine if kind.kind in ROLLING else ():
                if pod["metadata"]["annotations"].get(TEMPLATE_HASH) != digest and \
                        pod["status"]["phase"] in ("Pending", "Running"):
                    del self.pods[(namespace, pod["metadata"]["name"])]  # a rollout
            mine = [p for p in self.object_pods(obj)
                    if p["metadata"]["annotations"].get("double.allot.io/pod-set") == str(index)]
            live = [p for p in mine if p["status"]["phase"] in ("Pending", "Running")]
            done = sum(1 for p in mine if p["status"]["phase"] == "Succeeded")
            if kind.kind in SCALING and len(live) > count:
                # Scaled down: the controller deletes the surplus, gated and pending pods
                # before running ones (as the ReplicaSet controller ranks them), newest first.
                ranked = sorted(live, key=lambda p: (not p["spec"].get("schedulingGates"),
                                                     p["status"]["phase"] == "Running",
                                                     p["metadata"]["name"]))
                for pod in ranked[:len(live) - count]:
                    del self.pods[(namespace, pod["metadata"]["name"])]
                    self.record_pod("DELETED", pod)
            for _ in range(count - len(live) - done):
                self._create_pod_from(obj, kind, index, template, digest)
        status.pop("suspendedAt", None)
        self._report(kind, obj, "Running")

    def _reconcile_groups(self, kind: kinds.Kind, obj: dict) -> None:
        """A LeaderWorkerSet's pods as its controller names and labels them: group g's leader
        `<name>-<g>`, its workers `<name>-<g>-<w>`, each labelled with the object's name, the
        group index and the worker index (0: the leader); pods of an older template are
        replaced (a rollout), pods of groups past `replicas` deleted (a scale-down)."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        base = get(obj, "spec.leaderWorkerTemplate") or {}
        raw = get(obj, "spec.replicas")
        groups, size = (1 if raw is None else int(raw)), int(base.get("size") or 1)
        worker = base.get("workerTemplate") or {}
        leader = base.get("leaderTemplate") or worker
        wanted = set()
        for g in range(groups):
            for w in range(size):
                pod_name = f"{name}-{g}" if w == 0 else f"{name}-{g}-{w}"
                wanted.add(pod_name)
                template = leader if w == 0 else worker
                digest = _hash(template)
                pod = self.pods.get((namespace, pod_name))
                if pod is not None and pod["metadata"]["annotations"].get(TEMPLATE_HASH) != \
                        digest and pod["status"]["phase"] in ("Pending", "Running"):
                    del self.pods[(namespace, pod_name)]  # a rollout
                    pod = None
                if pod is None:
                    self._create_pod_from(obj, kind, 0 if w == 0 else 1, template, digest,
                                          pod_name=pod_name, labels={
                                              LWS_NAME: name, LWS_GROUP: str(g),
                                              LWS_WORKER: str(w)})
        for pod in self.object_pods(obj):
            if pod["metadata"]["name"] not in wanted:
                del self.pods[(namespace, pod["metadata"]["name"])]
                self.record_pod("DELETED", pod)

    def _create_pod_from(self, obj: dict, kind: kinds.Kind, index: int, template: dict,
                         digest: str, *, pod_name: str = "",
                         labels: dict[str, str] | None = None) -> None:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        pod_name = pod_name or f"{name}-{index}-{uuid.uuid4().hex[:5]}"
        meta = copy.deepcopy(template.get("metadata") or {})
        self.pods[(namespace, pod_name)] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": self.new_meta({
                "name": pod_name, "labels": {**(meta.get("labels") or {}), **(labels or {})},
                "annotations": {**(meta.get("annotations") or {}), TEMPLATE_HASH: digest,
                                "double.allot.io/pod-set": str(index)},
                "ownerReferences": [{"apiVersion": kind.api_version, "kind": kind.kind,
                                     "name": name, "uid": obj["metadata"]["uid"],
                                     "controller": True}],
            }, namespace),
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }

    def _finished(self, kind: kinds.Kind, obj: dict) -> bool:
        state = kind.state(obj)
        return state.succeeded or state.failed

    def settle_object(self, kind: kinds.Kind, obj: dict) -> None:
        """After pods moved: report success once every pod succeeded, failure on a failed
        pod (serving kinds only count ready replicas)."""
        pods = self.object_pods(obj)
        phases = [p["status"]["phase"] for p in pods]
        wanted = sum(c for c, _ in self._templates(kind, obj))
        obj["status"]["readyReplicas"] = phases.count("Running")
        if kind.serving:
            return
        if "Failed" in phases:
            self._report(kind, obj, "Failed")
        elif phases.count("Succeeded") >= wanted:
            self._report(kind, obj, "Succeeded")

    @staticmethod
    def _report(kind: kinds.Kind, obj: dict, what: str) -> None:
        """Write `what` (Suspended, Running, Succeeded, Failed) in the kind's own shape."""
        status = obj["status"]
        if kind.kind == "RayJob":
            status["jobDeploymentStatus"] = {"Succeeded": "Complete"}.get(what, what)
            if what in ("Succeeded", "Failed"):
                status["jobStatus"] = "SUCCEEDED" if what == "Succeeded" else "FAILED"
            return
        if kind.api_version.startswith("batch.volcano.sh"):
            phase = {"Succeeded": "Completed", "Suspended": "Pending"}.get(what, what)
            status["state"] = {"phase": phase}
            return
        if kind.serving and what in ("Succeeded", "Failed"):
            return
        words = {"kubeflow.org": {"Succeeded": "Succeeded"},
                 "jobset.x-k8s.io": {"Succeeded": "Completed"},
                 "trainer.kubeflow.org": {"Succeeded": "Complete"}}.get(kind.group, {})
        ctype = words.get(what, what)
        conditions = [c for c in status.get("conditions", [])
                      if c["type"] not in ("Suspended", "Running")]
        conditions.append({"type": ctype, "status": "True", "reason": what,
                           "message": f"{kind.kind} is {what.lower()}"})
        status["conditions"] = conditions

    def set_workload_pods(self, namespace: str, workload_id: int, phase: str,
                          count: int | None = None, *, ungated_only: bool = True) -> int:
        """Move up to `count` (None = all) live pods of a workload's object to `phase`
        (gated pods cannot be scheduled: they stay Pending); returns how many moved."""
        with self.lock:
            moved = 0
            for (ns, _), pod in sorted(self.pods.items()):
                labels = pod["metadata"].get("labels") or {}
                if ns != namespace or labels.get("allot.io/workload-id") != str(workload_id):
                    continue
                if pod["status"]["phase"] in ("Succeeded", "Failed", phase):
                    continue
                if ungated_only and pod["spec"].get("schedulingGates") and phase != "Pending":
                    continue
                if count is not None and moved >= count:
                    break
                pod["status"]["phase"] = phase
                self.record_pod("MODIFIED", pod)
                moved += 1
            for (_, ns, _), obj in self.objects.items():
                if ns == namespace and (obj["metadata"].get("labels") or {}).get(
                        "allot.io/workload-id") == str(workload_id):
                    kind = kinds.kind_of(obj)
                    self.settle_object(kind, obj)
            return moved

    def patch_pod(self, namespace: str, name: str, patch: Any, content_type: str) -> dict:
        """Patch a pod as the API server allows: its labels change freely, its spec is
        immutable but for scheduling gates, which may only be removed, and, while it is gated,
        its scheduling directives, which may only narrow it: node selector entries added,
        tolerations added, the required node affinity set (a 422 otherwise)."""
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise not_found("pods", name)
            patched = apply_patch(copy.deepcopy(pod), patch, content_type)
            before = {g["name"] for g in pod["spec"].get("schedulingGates") or []}
            after = {g["name"] for g in patched["spec"].get("schedulingGates") or []}
            mutable = {"schedulingGates"}
            if before:
                mutable |= {"nodeSelector", "tolerations", "affinity"}
            old_sel = pod["spec"].get("nodeSelector") or {}
            new_sel = patched["spec"].get("nodeSelector") or {}
            old_tol = pod["spec"].get("tolerations") or []
            new_tol = patched["spec"].get("tolerations") or []
            rest = {k: v for k, v in patched["spec"].items() if k not in mutable}
            if (not after <= before or rest != {k: v for k, v in pod["spec"].items()
                                                if k not in mutable}
                    or any(new_sel.get(k) != v for k, v in old_sel.items())
                    or new_tol[:len(old_tol)] != old_tol):
                raise invalid("Pod", name, [("spec", "Forbidden: pod updates may not change "
                                             "fields other than ... spec.schedulingGates "
                                             "(only removal), and scheduling directives of "
                                             "a gated pod (only additions)")])
            for key in mutable:
                if key in patched["spec"]:
                    pod["spec"][key] = patched["spec"][key]
            pod["spec"]["schedulingGates"] = patched["spec"].get("schedulingGates") or []
            pod["metadata"]["labels"] = patched["metadata"].get("labels") or {}
            self.record_pod("MODIFIED", pod)
            return pod

    def delete_pod(self, namespace: str, name: str) -> dict:
        """Delete a pod; its owner's controller makes a new one (from its current template)."""
        with self.lock:
            pod = self.pods.pop((namespace, name), None)
            if pod is None:
                raise not_found("pods", name)
            for (_, ns, _), obj in list(self.objects.items()):
                if ns == namespace and any(r.get("uid") == obj["metadata"]["uid"]
                                           for r in pod["metadata"].get("ownerReferences", [])):
                    self.reconcile_object(kinds.kind_of(obj), obj)
            return pod
