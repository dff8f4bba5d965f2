"""What a Kubernetes cluster runs: the status of workloads (their Jobs and pods) and the list of
Allot's workloads on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from scheduling.backends.base import PodSetStatus, WorkloadRef, WorkloadStatus
from scheduling.backends.k8s.groups import group_refs
from scheduling.backends.k8s.objects import ObjectsMixin
from scheduling.backends.naming import (
    LABEL_MANAGED_BY,
    LABEL_WORKLOAD_ID,
    MANAGED_BY,
    parse_job_name,
)

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


class StatusMixin(ObjectsMixin):
    """workload_status, workload_statuses, list_workloads."""

    def workload_status(self, ref: WorkloadRef) -> WorkloadStatus:
        """Per pod set: Job spec/conditions, and pod phases from the pods list."""
        return self.workload_statuses([ref])[0]

    def workload_statuses(self, refs: Sequence[WorkloadRef]) -> list[WorkloadStatus]:
        """Statuses of many workloads with two list calls per namespace (Jobs and pods); a
        manifest workload's object is read on its own."""
        if any(r.kind for r in refs):
            objects = iter(self._object_statuses([r for r in refs if r.kind]))
            jobs_only = iter(self.workload_statuses([r for r in refs if not r.kind]))
            return [next(objects) if r.kind else next(jobs_only) for r in refs]
        if not refs:
            return []
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
        """Every workload of Allot on the cluster: its Jobs grouped by namespace and workload,
        and the object of every other kind it serves (an adopted one under its own name)."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_WORKLOAD_ID}"
        try:
            jobs = self._call(
                "list Allot Jobs", self.batch.list_job_for_all_namespaces,
                label_selector=selector,
            ).items
        except k8s.ApiException as error:
            raise self._unexpected("list Allot Jobs", error) from error
        grouped: dict[tuple[str, int], list[tuple[int, str]]] = {}
        born: dict[tuple[str, int], datetime] = {}
        for job in jobs:
            parsed = parse_job_name(job.metadata.name)
            if parsed is None:
                continue
            workload_id, index = parsed
            key = (job.metadata.namespace, workload_id)
            grouped.setdefault(key, []).append((index, job.metadata.name))
            created = _created(job.metadata.creation_timestamp)
            if created is not None:
                born[key] = min(created, born.get(key, created))
        refs = [
            WorkloadRef(namespace=ns, workload_id=wid,
                        job_names=tuple(name for _, name in sorted(names)),
                        created_at=born.get((ns, wid)))
            for (ns, wid), names in sorted(grouped.items())
        ]
        for kind, obj in self.allot_objects():
            owner = self.object_workload_id(obj)
            if owner is None:
                continue
            meta = obj.get("metadata") or {}
            name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
            parsed = parse_job_name(name)
            groups = group_refs(kind, obj, _created(meta.get("creationTimestamp")))
            if groups is not None:  # an adopted LeaderWorkerSet: a workload per group
                refs += groups
                continue
            refs.append(WorkloadRef(
                namespace=namespace, workload_id=owner,
                job_names=(name,) if parsed is not None else (), kind=kind.key,
                adopted_name="" if parsed is not None else name,
                created_at=_created(meta.get("creationTimestamp"))))
        return refs


def _created(value: Any) -> datetime | None:
    """A creation timestamp as the client gives it (a datetime for Jobs, RFC 3339 text for
    custom objects), aware; None when missing or unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return None
