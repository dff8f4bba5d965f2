"""The replica groups of a LeaderWorkerSet adopted from a cluster (kubectl apply with the queue
label): the object is the user's and stays one, each group is a workload of its own. Its pod
templates carry Allot's scheduling gate (the webhook put it there), so the LeaderWorkerSet
controller makes every group's pods gated; a group's pods are the ones labelled with the
object's name and the group's index (`leaderworkerset.sigs.k8s.io/name`, `.../group-index`;
the leader is `.../worker-index: "0"`).

- **dispatch** records the group's placement on the object, in the annotation
  `allot.io/group.<index>` (`{"workload", "admitted", "pod_sets": [{labels, node_selector,
  nodes, gpus}]}`, leader first): nothing of the object itself changes;
- **start** marks the group admitted and lifts the gate from its pods one by one, writing the
  placement into each while it is still gated (a gated pod's node selector and required node
  affinity may be narrowed, tolerations added: Kubernetes' mutable scheduling directives), and
  its workload's labels, so the watcher, the status read and billing find it as any
  workload's pods;
- **preempt** marks it held back and deletes its ungated pods: the controller makes the group
  again from its template, gated;
- **status** reads the group's pods (a pod made again after a restart comes gated: an
  admitted group's status read places and ungates it);
- **delete** (the group ended) marks it ended and stops its pods; once every group of the
  object (the annotation `allot.io/group-workloads`, written by the webhook) has ended, the
  object is deleted.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as k8s

from scheduling import kinds
from scheduling.backends.base import (
    AdoptedObject,
    DispatchRefused,
    PodSetStatus,
    RefusalReason,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
)
from scheduling.backends.k8s.client import JSON_PATCH, MERGE_PATCH, KubeClient
from scheduling.backends.naming import (
    ANNOTATION_GROUP_WORKLOADS,
    LABEL_WORKLOAD_ID,
    LWS_GROUP_LABEL,
    LWS_NAME_LABEL,
    LWS_WORKER_LABEL,
    job_labels,
)
from scheduling.kinds import SCHEDULING_GATE, Kind, Placement
from scheduling.kinds.base import merge_placement

ENDED = "ended"


def group_annotation(group: int) -> str:
    """The annotation holding one group's placement and admission."""
    return f"allot.io/group.{int(group)}"


def group_workload_ids(obj: Mapping[str, Any]) -> list[int]:
    """The workload ids of an adopted object's groups (its annotation), in group order."""
    raw = str(((obj.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_GROUP_WORKLOADS, ""))
    return [int(x) for x in raw.split(",") if x.strip().isdigit()]


def _record(obj: Mapping[str, Any] | None, group: int) -> dict[str, Any] | None:
    raw = ((obj or {}).get("metadata") or {}).get("annotations", {}) or {}
    value = raw.get(group_annotation(group))
    if not value or value == ENDED:
        return None
    try:
        record = json.loads(value)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _gated(pod: Any) -> bool:
    return any(g.name == SCHEDULING_GATE for g in pod.spec.scheduling_gates or [])


def _pod_set_of(pod: Any, sets: int) -> int:
    """The pod set of a group's pod: the leader (worker index 0) is 0, the workers 1."""
    worker = (pod.metadata.labels or {}).get(LWS_WORKER_LABEL, "0")
    return 0 if worker == "0" or sets < 2 else 1


class GroupsMixin(KubeClient):
    """create, start, suspend, delete and read one replica group of an adopted object."""

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api_client)

    def _get_object(self, kind: Kind, ref: WorkloadRef) -> dict[str, Any] | None:
        """The object of `ref` (None if it is gone)."""
        what = f'read {kind.kind} "{ref.object_name}" in namespace "{ref.namespace}"'
        try:
            return self._call(what, self.custom.get_namespaced_custom_object, kind.group,  # type: ignore[no-any-return]
                              kind.version, ref.namespace, kind.plural, ref.object_name)
        except k8s.ApiException as error:
            if error.status == 404:
                return None
            raise self._unexpected(what, error) from error

    def _annotate(self, kind: Kind, ref: WorkloadRef, annotations: Mapping[str, Any],
                  what: str) -> None:
        self._call(what, self.custom.patch_namespaced_custom_object, kind.group, kind.version,
                   ref.namespace, kind.plural, ref.object_name,
                   {"metadata": {"annotations": dict(annotations)}}, _content_type=MERGE_PATCH)

    def _gone(self, kind: Kind, ref: WorkloadRef) -> DispatchRefused:
        return DispatchRefused(
            RefusalReason.JOB_GONE, f'{kind.kind} "{ref.object_name}" in namespace '
            f'"{ref.namespace}" on cluster {self.name} no longer exists (group {ref.group})')

    def _create_group(self, kind: Kind, spec: WorkloadSpec) -> WorkloadRef:
        """Record where the group goes on the user's object (it exists: the user made it)."""
        ref = spec.ref
        group = int(ref.group or 0)
        obj = self._get_object(kind, ref)
        if obj is None:
            raise self._gone(kind, ref)
        if spec.workload_id not in group_workload_ids(obj):
            raise DispatchRefused(
                RefusalReason.CONFLICT,
                f'{kind.kind} "{ref.object_name}" in namespace "{ref.namespace}" on cluster '
                f"{self.name} does not list workload {spec.workload_id} among its groups")
        record = {"workload": spec.workload_id, "admitted": False, "pod_sets": [
            {"labels": {**{str(k): str(v) for k, v in spec.labels.items()}, **job_labels(
                workload_id=spec.workload_id, queue_path=spec.queue_path,
                pod_set_index=p.index, flavor=p.flavor)},
             "node_selector": dict(p.node_selector), "nodes": sorted(set(p.nodes)),
             "gpus": p.gpus > 0} for p in spec.pod_sets]}
        what = f'place group {group} of {kind.kind} "{ref.object_name}" in namespace ' \
               f'"{ref.namespace}"'
        try:
            self._annotate(kind, ref, {group_annotation(group): json.dumps(
                record, sort_keys=True, separators=(",", ":"))}, what)
        except k8s.ApiException as error:
            if error.status == 404:
                raise self._gone(kind, ref) from error
            raise self._unexpected(what, error) from error
        return ref

    def adopted_objects(self, kind: str) -> list[AdoptedObject]:
        """Every object of `kind` listing its groups (`allot.io/group-workloads`), in every
        namespace: one list call ([] when the cluster does not serve the kind)."""
        found = kinds.kind_named(kind)
        if found is None or kind not in self.served_kinds():
            return []
        out = []
        for obj in self._labelled_objects(found, f"list adopted {found.kind} objects"):
            meta = obj.get("metadata") or {}
            if ANNOTATION_GROUP_WORKLOADS not in (meta.get("annotations") or {}):
                continue  # Allot's own object (a group submitted through the API)
            raw = (obj.get("spec") or {}).get("replicas", 1)
            first = str((meta.get("labels") or {}).get(LABEL_WORKLOAD_ID, ""))
            out.append(AdoptedObject(
                namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                replicas=raw if isinstance(raw, int) and raw >= 0 else 1,
                workload_ids=tuple(group_workload_ids(obj)),
                first_workload_id=int(first) if first.isdigit() else None))
        return out

    def _labelled_objects(self, kind: Kind, what: str) -> list[dict[str, Any]]:
        """Every object of `kind` labelled with an Allot workload id, in every namespace (one
        list call); none when the cluster does not serve the kind or Allot may not read it."""
        try:
            listed = self._call(what, self.custom.list_cluster_custom_object, kind.group,
                                kind.version, kind.plural, label_selector=LABEL_WORKLOAD_ID)
        except k8s.ApiException as error:
            if error.status in (403, 404):
                return []
            raise self._unexpected(what, error) from error
        return list(listed.get("items") or [])

    def served_kinds(self) -> list[str]:
        raise NotImplementedError  # ObjectsMixin's (API discovery)

    def set_adopted_groups(self, kind: str, namespace: str, name: str, workload_ids: list[int],
                           fresh: list[int]) -> bool:
        """List the object's groups (a scale followed); the groups `fresh` lose what an
        earlier group of that index left (`ended`). False: the object is gone."""
        found = kinds.kind_named(kind)
        if found is None:
            return False
        ref = WorkloadRef(namespace=namespace, workload_id=0, job_names=(), kind=kind,
                          adopted_name=name)
        annotations: dict[str, Any] = {
            ANNOTATION_GROUP_WORKLOADS: ",".join(str(i) for i in workload_ids),
            **{group_annotation(g): None for g in fresh}}  # null: removed (merge patch)
        what = f'list the groups of {found.kind} "{name}" in namespace "{namespace}"'
        try:
            self._annotate(found, ref, annotations, what)
        except k8s.ApiException as error:
            if error.status == 404:
                return False
            raise self._unexpected(what, error) from error
        return True

    def _set_group_gates(self, kind: Kind, ref: WorkloadRef, suspend: bool) -> None:
        """Start (ungate and place the group's pods) or preempt (delete its ungated pods,
        made again gated) one group."""
        group = int(ref.group or 0)
        verb = "suspend" if suspend else "start"
        what = f'{verb} group {group} of {kind.kind} "{ref.object_name}" in namespace ' \
               f'"{ref.namespace}"'
        obj = self._get_object(kind, ref)
        record = _record(obj, group)
        if obj is None or record is None:
            if suspend:
                return  # gone (or ended) is as stopped as held back
            raise self._gone(kind, ref) if obj is None else DispatchRefused(
                RefusalReason.INVALID, f"cluster {self.name}: {what}: not placed")
        record["admitted"] = not suspend
        try:
            self._annotate(kind, ref, {group_annotation(group): json.dumps(
                record, sort_keys=True, separators=(",", ":"))}, what)
        except k8s.ApiException as error:
            if error.status == 404:
                if suspend:
                    return
                raise self._gone(kind, ref) from error
            raise self._unexpected(what, error) from error
        pods = self._group_pods(ref)
        if suspend:
            self._stop_group_pods(ref, pods)
        else:
            self._place_group_pods(ref, record, pods)

    def _delete_group(self, kind: Kind, ref: WorkloadRef) -> None:
        """The group ended: mark it, stop its pods; the last group to end deletes the object."""
        group = int(ref.group or 0)
        what = f'end group {group} of {kind.kind} "{ref.object_name}" in namespace ' \
               f'"{ref.namespace}"'
        try:
            self._annotate(kind, ref, {group_annotation(group): ENDED}, what)
        except k8s.ApiException as error:
            if error.status == 404:
                return
            raise self._unexpected(what, error) from error
        self._stop_group_pods(ref, self._group_pods(ref))
        obj = self._get_object(kind, ref)
        if obj is None:
            return
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        groups = range(len(group_workload_ids(obj)))
        # Scaled (its groups not yet listed again by the sync) or scaled to zero: the object is
        # the user's and may grow again; it goes once its listed groups have all ended.
        scaled = (obj.get("spec") or {}).get("replicas", 1) != len(groups)
        if groups and not scaled and all(
                annotations.get(group_annotation(g)) == ENDED for g in groups):
            self._delete_whole_object(kind, ref)

    def _delete_whole_object(self, kind: Kind, ref: WorkloadRef) -> None:
        """Delete the object of `ref` and, in the background, what it owns (gone: done)."""
        what = f'delete {kind.kind} "{ref.object_name}" in namespace "{ref.namespace}"'
        try:
            self._call(what, self.custom.delete_namespaced_custom_object, kind.group,
                       kind.version, ref.namespace, kind.plural, ref.object_name,
                       propagation_policy="Background")
        except k8s.ApiException as error:
            if error.status != 404:
                raise self._unexpected(what, error) from error

    def _group_pods(self, ref: WorkloadRef) -> list[Any]:
        """The live pods of one group (by the LeaderWorkerSet controller's labels)."""
        selector = f"{LWS_NAME_LABEL}={ref.object_name},{LWS_GROUP_LABEL}={int(ref.group or 0)}"
        what = f"list pods of group {ref.group} of {ref.object_name} in {ref.namespace}"
        try:
            pods = self._call(what, self.core.list_namespaced_pod, ref.namespace,
                              label_selector=selector).items
        except k8s.ApiException as error:
            if error.status == 404:
                return []
            raise self._unexpected(what, error) from error
        return [p for p in pods if p.metadata.deletion_timestamp is None]

    def _stop_group_pods(self, ref: WorkloadRef, pods: Sequence[Any]) -> None:
        for pod in pods:
            if _gated(pod):
                continue  # held back already
            name = pod.metadata.name
            try:
                self._call(f"delete pod {name}", self.core.delete_namespaced_pod, name,
                           ref.namespace, grace_period_seconds=None)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise self._unexpected(f"delete pod {name}", error) from error

    def _place_group_pods(self, ref: WorkloadRef, record: Mapping[str, Any],
                          pods: Sequence[Any]) -> None:
        """Write the group's placement into each of its gated pods and lift the gate, in one
        JSON patch tested against the pod's resourceVersion."""
        sets = list(record.get("pod_sets") or [])
        if not sets:
            return
        for pod in pods:
            if not _gated(pod):
                continue
            where = sets[_pod_set_of(pod, len(sets))]
            body = self.api_client.sanitize_for_serialization(pod)
            meta, spec = body.get("metadata") or {}, body.get("spec") or {}
            placed = {"metadata": {"labels": copy.deepcopy(meta.get("labels") or {})},
                      "spec": copy.deepcopy(spec)}
            merge_placement(placed, Placement(
                labels=dict(where.get("labels") or {}), annotations={},
                node_selector=dict(where.get("node_selector") or {}),
                nodes=tuple(where.get("nodes") or ()), gpus=bool(where.get("gpus"))),
                gated=False)
            gates = [g for g in spec.get("schedulingGates") or []
                     if g.get("name") != SCHEDULING_GATE]
            patch = [{"op": "test", "path": "/metadata/resourceVersion",
                      "value": meta.get("resourceVersion")},
                     {"op": "add", "path": "/metadata/labels",
                      "value": placed["metadata"]["labels"]}]
            for field in ("nodeSelector", "affinity", "tolerations"):
                if placed["spec"].get(field) != spec.get(field):
                    patch.append({"op": "add", "path": f"/spec/{field}",
                                  "value": placed["spec"][field]})
            patch.append({"op": "replace", "path": "/spec/schedulingGates", "value": gates})
            name = pod.metadata.name
            try:
                self._call(f"ungate pod {name}", self.core.patch_namespaced_pod, name,
                           ref.namespace, patch, _content_type=JSON_PATCH)
            except k8s.ApiException as error:
                if error.status not in (404, 409, 422):  # gone or changed: the next read
                    raise self._unexpected(f"ungate pod {name}", error) from error

    def _group_status(self, kind: Kind, ref: WorkloadRef) -> WorkloadStatus:
        """One group's pod sets: its leader and its workers, by phase; held back until
        admitted. An admitted group's pods made again (gated) are placed and ungated."""
        obj = self._get_object(kind, ref)
        record = _record(obj, int(ref.group or 0))
        if obj is None:
            return WorkloadStatus(ref=ref, pod_sets=tuple(
                PodSetStatus(job_name=n, exists=False) for n in ref.job_names))
        one = copy.deepcopy(obj)
        one.setdefault("spec", {})["replicas"] = 1
        try:
            counts = [ps.count for ps in kind.derive(one)]
        except kinds.ManifestError:
            counts = []
        admitted = bool(record and record.get("admitted"))
        pods = self._group_pods(ref)
        if admitted and record is not None and any(_gated(p) for p in pods):
            self._place_group_pods(ref, record, pods)
            pods = self._group_pods(ref)
        phases: dict[int, dict[str, int]] = {}
        for pod in pods:
            index = _pod_set_of(pod, len(counts))
            phase = (pod.status and pod.status.phase) or "Pending"
            per = phases.setdefault(index, {})
            per[phase] = per.get(phase, 0) + 1
        sets = []
        for i, name in enumerate(ref.job_names):
            per = phases.get(i, {})
            sets.append(PodSetStatus(
                job_name=name, exists=True, count=counts[i] if i < len(counts) else 0,
                suspended=not admitted, pending=per.get("Pending", 0),
                running=per.get("Running", 0), succeeded=0, failed=per.get("Failed", 0)))
        return WorkloadStatus(ref=ref, pod_sets=tuple(sets))


def group_refs(kind: Kind, obj: Mapping[str, Any],
               created_at: Any) -> list[WorkloadRef] | None:
    """The refs of an adopted object's groups (list_workloads), or None: not split."""
    ids = group_workload_ids(obj)
    if not ids:
        return None
    meta = obj.get("metadata") or {}
    return [WorkloadRef(namespace=str(meta.get("namespace", "")), workload_id=wid,
                        job_names=(), kind=kind.key, adopted_name=str(meta.get("name", "")),
                        group=g, created_at=created_at) for g, wid in enumerate(ids)]

