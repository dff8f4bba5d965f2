"""Workloads submitted as manifests (scheduling.kinds) on a Kubernetes cluster: one object of
the manifest's kind through the custom objects API (the same paths `kubectl` uses, built-in
groups too), created held back and placed, started, suspended, deleted, and read back.

Kinds with a suspend field are suspended and resumed by a merge patch of it. Kinds without
one (Deployment, StatefulSet, LeaderWorkerSet, Volcano Job) carry a scheduling gate in their
pod templates while not admitted: starting replaces the object with the gate lifted and
deletes the gated pods (their controller makes them again, ungated); suspending puts the gate
back and deletes the pods. A scalable kind (Deployment, StatefulSet) keeps the gate in its
template (a template change would roll every pod out): starting lifts it from as many pods as
are admitted (`allot.io/admitted-pods`), pod by pod, and so does every status read (pods its
controller makes again, or a rollout's, come gated); pods a scale-up adds stay gated until
`admit_pods` raises the count. Which kinds a cluster serves is read from its API discovery
(`GET /apis`), kept a minute.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as k8s

from scheduling import kinds
from scheduling.backends.base import (
    DispatchRefused,
    PodSetStatus,
    RefusalReason,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
)
from scheduling.backends.k8s.client import JSON_PATCH, MERGE_PATCH
from scheduling.backends.k8s.groups import GroupsMixin
from scheduling.backends.k8s.jobs import sharing_fields
from scheduling.backends.naming import (
    KAI_QUEUE_LABEL,
    LABEL_POD_SET,
    LABEL_WORKLOAD_ID,
    job_labels,
)
from scheduling.kinds import SCHEDULING_GATE, Kind, Placement
from scheduling.kinds.base import ANNOTATION_ADMITTED, ANNOTATION_ADMITTED_PODS

SERVED_TTL_S = 60.0


def kind_for(key: str) -> Kind:
    found = kinds.kind_named(key)
    if found is None:
        raise DispatchRefused(RefusalReason.INVALID, f"unknown workload kind {key!r}")
    return found


class ObjectsMixin(GroupsMixin):
    """The objects of manifest workloads: create, start, suspend, delete, status, kinds (one
    replica group of an adopted LeaderWorkerSet: scheduling/backends/k8s/groups.py)."""

    _served: tuple[float, frozenset[str]] | None = None

    def served_kinds(self) -> list[str]:
        """The kinds whose group/version the cluster's API lists (`GET /apis`)."""
        now = time.monotonic()
        if self._served is not None and now - self._served[0] < SERVED_TTL_S:
            return sorted(self._served[1])
        try:
            groups = self._call("list API groups", k8s.ApisApi(self.api_client).get_api_versions)
        except k8s.ApiException as error:
            raise self._unexpected("list API groups", error) from error
        versions = {v.group_version for g in groups.groups or [] for v in g.versions or []}
        served = frozenset(k.key for k in kinds.KINDS.values() if k.api_version in versions)
        self._served = (now, served)
        return sorted(served)

    def allot_objects(self) -> list[tuple[Kind, dict[str, Any]]]:
        """Every object of a served kind (other than batch/v1 Job, listed as Jobs) labelled
        with an Allot workload id, in every namespace: created by Allot or adopted."""
        out = []
        for key in self.served_kinds():
            kind = kinds.KINDS[key]
            if key == "batch/v1/Job":
                continue
            # (Not served after all, or not Allot's to read: nothing of it.)
            out += [(kind, obj)
                    for obj in self._labelled_objects(kind, f"list {kind.kind} objects of Allot")]
        return out

    @staticmethod
    def object_workload_id(obj: dict[str, Any]) -> int | None:
        """The Allot workload id an object is labelled with (None: not a whole number)."""
        raw = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_WORKLOAD_ID, "")
        return int(raw) if str(raw).isdigit() else None

    def _check_kind(self, kind: Kind) -> None:
        if kind.key not in self.served_kinds():
            raise DispatchRefused(
                RefusalReason.KIND_NOT_SERVED,
                f"cluster {self.name} does not serve {kind.kind} ({kind.api_version} is not "
                "in its API: the operator or CRD is not installed)")

    def _create_object(self, spec: WorkloadSpec, *, sharing: str = "",
                       card_uuids: Mapping[str, Sequence[str]] | None = None,
                       kai_queue: str = "default-queue") -> WorkloadRef:
        """Create the manifest's object held back, each pod template carrying its pod set's
        placement and what the cluster's GPU sharing mechanism needs (as a Job's would:
        `sharing_fields`)."""
        kind = kind_for(spec.kind)
        self._check_kind(kind)
        ref = spec.ref
        if ref.group is not None:
            return self._create_group(kind, spec)
        placements = []
        for p in spec.pod_sets:
            shared = sharing_fields(p, sharing, card_uuids, kai_queue)
            placements.append(Placement(
                labels={**{str(k): str(v) for k, v in spec.labels.items()}, **job_labels(
                    workload_id=spec.workload_id, queue_path=spec.queue_path,
                    pod_set_index=p.index, flavor=p.flavor), **shared.labels},
                annotations={"allot.io/workload-name": spec.name, **shared.annotations},
                node_selector=dict(p.node_selector), nodes=tuple(p.nodes), gpus=p.gpus > 0,
                priority_class=spec.priority_class,
                termination_grace_s=spec.termination_grace_s,
                scheduler_name=shared.scheduler_name, gpu_limits=shared.gpu_limits,
            ))
        labels = job_labels(workload_id=spec.workload_id, queue_path=spec.queue_path,
                            pod_set_index=0, flavor=spec.pod_sets[0].flavor)
        labels.pop(LABEL_POD_SET)
        annotations = {**spec.annotations, "allot.io/workload-name": spec.name}
        if kind.scalable:  # the object may ask more (a scale-up waiting): these are admitted
            annotations[ANNOTATION_ADMITTED_PODS] = str(sum(p.count for p in spec.pod_sets))
        if sharing == "kai":
            labels[KAI_QUEUE_LABEL] = kai_queue  # KAI groups the pods by their top owner
        try:
            body = kind.prepare(spec.manifest, name=ref.object_name, namespace=spec.namespace,
                                labels=labels, annotations=annotations, placements=placements)
        except kinds.ManifestError as exc:
            raise DispatchRefused(RefusalReason.INVALID, f"workload {spec.workload_id}: "
                                  f"{exc}") from exc
        what = f'create {kind.kind} "{ref.object_name}" in namespace "{spec.namespace}"'
        with self._refusals(f"cluster {self.name}: {what}"):
            try:
                self._call(what, self.custom.create_namespaced_custom_object, kind.group,
                           kind.version, spec.namespace, kind.plural, body)
                return ref
            except k8s.ApiException as error:
                if error.status != 409:
                    raise
        current = self._get_object(kind, ref)
        owner = ((current or {}).get("metadata", {}).get("labels") or {}).get(LABEL_WORKLOAD_ID)
        if owner != str(spec.workload_id):
            raise DispatchRefused(
                RefusalReason.CONFLICT,
                f'{kind.kind} "{ref.object_name}" in namespace "{spec.namespace}" on cluster '
                f"{self.name} exists and belongs to workload {owner or 'none'}, "
                f"not {spec.workload_id}")
        if current is not None and kind.suspended(current):
            # Held back from an earlier admission elsewhere: its placement is stale.
            self._delete_object(ref)
            with self._refusals(f"cluster {self.name}: re-{what}"):
                self._call(what, self.custom.create_namespaced_custom_object, kind.group,
                           kind.version, spec.namespace, kind.plural, body)
        return ref

    def _set_object_suspend(self, ref: WorkloadRef, suspend: bool) -> None:
        kind = kind_for(ref.kind)
        if ref.group is not None:
            self._set_group_gates(kind, ref, suspend)
            return
        verb = "suspend" if suspend else "start"
        what = f'{verb} {kind.kind} "{ref.object_name}" in namespace "{ref.namespace}"'
        try:
            if kind.suspend_path:
                self._call(what, self.custom.patch_namespaced_custom_object, kind.group,
                           kind.version, ref.namespace, kind.plural, ref.object_name,
                           kind.suspend_patch(suspend), _content_type=MERGE_PATCH)
                return
            self._set_gates(kind, ref, suspend, what)
        except k8s.ApiException as error:
            if error.status == 404:
                if suspend:
                    return
                raise DispatchRefused(
                    RefusalReason.JOB_GONE, f'{kind.kind} "{ref.object_name}" in namespace '
                    f'"{ref.namespace}" on cluster {self.name} no longer exists') from error
            if not suspend and error.status in (400, 403, 422):
                raise DispatchRefused(
                    RefusalReason.API_ERROR, f"cluster {self.name}: {what}: HTTP "
                    f"{error.status}") from error
            raise self._unexpected(what, error) from error

    def _set_gates(self, kind: Kind, ref: WorkloadRef, suspend: bool, what: str) -> None:
        """Gate (or ungate) the pod templates and mark the object, then delete the pods made
        from the other template: the controller makes them again as the template says."""
        obj = self._call(what, self.custom.get_namespaced_custom_object, kind.group,
                         kind.version, ref.namespace, kind.plural, ref.object_name)
        if kind.scalable:
            self._set_scalable_gates(kind, ref, obj, suspend, what)
            return
        templates = [ps.template for ps in kind.derive(obj)]
        for template in templates:
            spec = template.setdefault("spec", {})
            gates = [g for g in spec.get("schedulingGates") or []
                     if g.get("name") != SCHEDULING_GATE]
            if suspend:
                gates.append({"name": SCHEDULING_GATE})
            spec["schedulingGates"] = gates
        obj.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION_ADMITTED] = (
            "false" if suspend else "true")
        obj.pop("status", None)
        self._call(what, self.custom.replace_namespaced_custom_object, kind.group,
                   kind.version, ref.namespace, kind.plural, ref.object_name, obj)
        for pod in self._pods_of([ref]).get(ref.workload_id, []):
            gated = any(g.name == SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])
            if gated == suspend:
                continue  # already as wanted
            name = pod.metadata.name
            try:
                self._call(f"delete pod {name}", self.core.delete_namespaced_pod, name,
                           ref.namespace, grace_period_seconds=None)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise

    def _set_scalable_gates(self, kind: Kind, ref: WorkloadRef, obj: dict[str, Any],
                            suspend: bool, what: str) -> None:
        """Mark a scalable object admitted (its template keeps the gate) and lift the gate
        from its admitted pods; or mark it held back and delete its ungated pods (made again
        gated)."""
        self._call(what, self.custom.patch_namespaced_custom_object, kind.group, kind.version,
                   ref.namespace, kind.plural, ref.object_name,
                   kind.suspend_patch(suspend), _content_type=MERGE_PATCH)
        if not suspend:
            self._ungate_pods(ref, _admitted_pods(kind, obj))
            return
        for pod in self._pods_of([ref]).get(ref.workload_id, []):
            if not _gated(pod):
                self._delete_pod(ref.namespace, pod.metadata.name)

    def admit_pods(self, ref: WorkloadRef, count: int) -> None:
        """Set how many pods of a scalable object are admitted and lift the gate from that
        many (a scale-up admitted, or a scale-down's lower count)."""
        kind = kind_for(ref.kind)
        what = f'admit {count} pods of {kind.kind} "{ref.object_name}" in namespace ' \
               f'"{ref.namespace}"'
        if self._merge_patch(kind, ref, {"metadata": {"annotations": {
                ANNOTATION_ADMITTED_PODS: str(count)}}}, what):
            self._ungate_pods(ref, count)

    def scale_object(self, ref: WorkloadRef, replicas: int) -> None:
        """Set a scalable object's `spec.replicas` (a scale through Allot's API)."""
        kind = kind_for(ref.kind)
        what = f'scale {kind.kind} "{ref.object_name}" in namespace "{ref.namespace}" to ' \
               f"{replicas}"
        self._merge_patch(kind, ref, {"spec": {"replicas": int(replicas)}}, what)

    def _merge_patch(self, kind: Kind, ref: WorkloadRef, patch: dict[str, Any],
                     what: str) -> bool:
        """Merge-patch the object of `ref`; False if it is gone."""
        try:
            self._call(what, self.custom.patch_namespaced_custom_object, kind.group,
                       kind.version, ref.namespace, kind.plural, ref.object_name, patch,
                       _content_type=MERGE_PATCH)
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            raise self._unexpected(what, error) from error
        return True

    def _ungate_pods(self, ref: WorkloadRef, admitted: int,
                     pods: list[Any] | None = None) -> None:
        """Lift the gate from gated pods (oldest name first) until `admitted` pods are
        ungated. A gate can only be removed from a pod, so the JSON patch replaces the list
        without Allot's gate, tested against the pod's resourceVersion."""
        if pods is None:
            pods = self._pods_of([ref]).get(ref.workload_id, [])
        gated = sorted((p for p in pods if _gated(p)), key=lambda p: p.metadata.name)
        room = admitted - (len(pods) - len(gated))
        for pod in gated[:max(0, room)]:
            name = pod.metadata.name
            rest = [{"name": g.name} for g in pod.spec.scheduling_gates or []
                    if g.name != SCHEDULING_GATE]
            patch = [{"op": "test", "path": "/metadata/resourceVersion",
                      "value": pod.metadata.resource_version},
                     {"op": "replace", "path": "/spec/schedulingGates", "value": rest}]
            try:
                self._call(f"ungate pod {name}", self.core.patch_namespaced_pod, name,
                           ref.namespace, patch, _content_type=JSON_PATCH)
            except k8s.ApiException as error:
                if error.status not in (404, 409, 422):  # gone or changed: the next read
                    raise self._unexpected(f"ungate pod {name}", error) from error

    def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            self._call(f"delete pod {name}", self.core.delete_namespaced_pod, name,
                       namespace, grace_period_seconds=None)
        except k8s.ApiException as error:
            if error.status != 404:
                raise

    def _delete_object(self, ref: WorkloadRef) -> None:
        kind = kind_for(ref.kind)
        if ref.group is not None:
            self._delete_group(kind, ref)
            return
        self._delete_whole_object(kind, ref)

    def _pods_of(self, refs: Sequence[WorkloadRef]) -> dict[int, list[Any]]:
        """The live pods of these workloads (one list call per namespace)."""
        out: dict[int, list[Any]] = {}
        by_ns: dict[str, set[int]] = {}
        for ref in refs:
            by_ns.setdefault(ref.namespace, set()).add(ref.workload_id)
        for ns, ids in by_ns.items():
            selector = f"{LABEL_WORKLOAD_ID} in ({','.join(str(i) for i in sorted(ids))})"
            what = f"list pods in namespace {ns}"
            try:
                pods = self._call(what, self.core.list_namespaced_pod, ns,
                                  label_selector=selector).items
            except k8s.ApiException as error:
                if error.status == 404:
                    continue
                raise self._unexpected(what, error) from error
            for pod in pods:
                if pod.metadata.deletion_timestamp is not None:
                    continue
                wid = (pod.metadata.labels or {}).get(LABEL_WORKLOAD_ID, "")
                if wid.isdigit():
                    out.setdefault(int(wid), []).append(pod)
        return out

    def _object_statuses(self, refs: Sequence[WorkloadRef]) -> list[WorkloadStatus]:
        """Each object's pod sets (as derived from it now), its pods by phase, and its own
        finished / failed status."""
        pods = self._pods_of(refs)
        out = []
        for ref in refs:
            kind = kind_for(ref.kind)
            if ref.group is not None:
                out.append(self._group_status(kind, ref))
                continue
            obj = self._get_object(kind, ref)
            if obj is None:
                out.append(WorkloadStatus(ref=ref, pod_sets=tuple(
                    PodSetStatus(job_name=n, exists=False) for n in ref.job_names)))
                continue
            try:
                counts = [ps.count for ps in kind.derive(obj)]
            except kinds.ManifestError:
                counts = []
            state = kind.state(obj)
            suspended = kind.suspended(obj)
            if kind.scalable and not suspended:
                # Pods made again (a restart, a rollout) come gated: lift it up to the count.
                self._ungate_pods(ref, _admitted_pods(kind, obj), pods.get(ref.workload_id, []))
            phases: dict[str, dict[str, int]] = {}
            for pod in pods.get(ref.workload_id, []):
                index = (pod.metadata.labels or {}).get(LABEL_POD_SET, "0")
                phase = (pod.status and pod.status.phase) or "Pending"
                per = phases.setdefault(index, {})
                per[phase] = per.get(phase, 0) + 1
            sets = []
            for i, name in enumerate(ref.job_names):
                count = counts[i] if i < len(counts) else 0
                per = phases.get(str(i), {})
                sets.append(PodSetStatus(
                    job_name=name, exists=True, count=count, suspended=suspended,
                    pending=per.get("Pending", 0), running=per.get("Running", 0),
                    # A serving kind's pods do not finish it (its controller restarts them).
                    succeeded=count if state.succeeded else (
                        0 if kind.serving else per.get("Succeeded", 0)),
                    failed=per.get("Failed", 0), job_failed=state.failed and i == 0,
                    message=state.message if state.failed and i == 0 else ""))
            out.append(WorkloadStatus(ref=ref, pod_sets=tuple(sets)))
        return out


def _gated(pod: Any) -> bool:
    return any(g.name == SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def _admitted_pods(kind: Kind, obj: dict[str, Any]) -> int:
    """How many pods of a scalable object are admitted (its annotation; else, an object
    adopted before it was set, its replicas)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ADMITTED_PODS)
    if raw is not None and str(raw).isdigit():
        return int(raw)
    try:
        return sum(ps.count for ps in kind.derive(obj))
    except kinds.ManifestError:
        return 0
