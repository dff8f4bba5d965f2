"""A workload's Jobs on a Kubernetes cluster: created suspended, started (unsuspended),
suspended on preemption, deleted.

A retried create finds its own Job (409) and keeps it; a suspended Job left from an earlier
admission with another flavor is replaced; a refusal of one pod set removes the Jobs of the
others just created, so the gang is all or nothing.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client as k8s

from scheduling.backends.base import DispatchRefused, RefusalReason, WorkloadRef, WorkloadSpec
from scheduling.backends.k8s.client import MERGE_PATCH, status_message
from scheduling.backends.k8s.jobs import SHARING, job_body
from scheduling.backends.k8s.namespaces import NamespacesMixin
from scheduling.backends.k8s.nodes import NodesMixin, hami_card_uuids
from scheduling.backends.k8s.objects import ObjectsMixin
from scheduling.backends.k8s.priority_classes import PriorityClassesMixin
from scheduling.backends.naming import LABEL_WORKLOAD_ID

KAI_QUEUE_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class DispatchMixin(NamespacesMixin, PriorityClassesMixin, NodesMixin, ObjectsMixin):
    """create_workload, start_workload, suspend_workload, delete_workload."""

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
        nodes = self._check_nodes(spec)
        sharing = str(self.connection.get("gpu_sharing") or "")
        if sharing not in SHARING:
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"cluster {self.name}: gpu_sharing {sharing!r} is not one of "
                f"{', '.join(s for s in SHARING if s)} (or unset)")
        kai_queue = str(self.connection.get("kai_queue") or "default-queue")
        if sharing == "kai" and not KAI_QUEUE_NAME.fullmatch(kai_queue):
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"cluster {self.name}: kai_queue {kai_queue!r} is not a label value (at most "
                "63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
                "digit)")
        uuids = ({name: hami_card_uuids(node.metadata.annotations if node.metadata else None)
                  for name, node in nodes.items()} if sharing == "hami" else None)
        if spec.kind:
            return self._create_object(spec, sharing=sharing, card_uuids=uuids,
                                       kai_queue=kai_queue)
        ref = spec.ref
        created: list[str] = []
        try:
            for pod_set in spec.pod_sets:
                body = job_body(
                    spec, pod_set, default_image=self.connection.get("default_image", ""),
                    sharing=sharing, card_uuids=uuids,
                    kai_queue=kai_queue,
                )
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
        if ref.kind:
            self._set_object_suspend(ref, suspend)
            return
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
                        f"HTTP {error.status}: {status_message(error)}",
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
        if ref.kind:
            self._delete_object(ref)
            return
        for name in ref.job_names:
            self._delete_job(ref.namespace, name)
