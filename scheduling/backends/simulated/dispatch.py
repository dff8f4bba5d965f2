"""A workload's Jobs on a simulated cluster, one workload at a time: created suspended (as
SimJob rows), started, suspended, deleted, or made to fail now.

A pod set's Job carries the cluster's speed and start delay at creation, and its failure point
when the connection names it or a fail-next countdown takes it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from scheduling import kinds
from scheduling.backends.base import DispatchRefused, RefusalReason, WorkloadRef, WorkloadSpec
from scheduling.backends.naming import LABEL_KIND
from scheduling.backends.simulated.refusals import RefusalsMixin


class DispatchMixin(RefusalsMixin):
    """create_workload, start_workload, suspend_workload, delete_workload, fail_job."""

    def admit_pods(self, ref: WorkloadRef, count: int) -> None:
        """A scalable workload's admitted pods changed (a scale-up merged, a scale-down): its
        Job runs `count` pods on the nodes of the workload's open admission. A simulated
        cluster holds no gated pods: only admitted ones exist."""
        from scheduling.backends.simulated.models import SimJob
        from scheduling.models import Admission

        adm = Admission.objects.filter(workload_id=ref.workload_id,
                                       ended_at__isnull=True).first()
        nodes = list(adm.nodes)[:count] if adm is not None else None
        for job in SimJob.objects.filter(cluster=self._cluster(), namespace=ref.namespace,
                                         name__in=ref.job_names):
            job.pods = count
            if nodes is not None:
                job.nodes = nodes
            job.save(update_fields=["pods", "nodes"])

    def scale_object(self, ref: WorkloadRef, replicas: int) -> None:
        """Nothing to scale: a simulated Job runs the admitted pods (`admit_pods`)."""

    def create_workload(self, spec: WorkloadSpec) -> WorkloadRef:
        """Create suspended SimJobs, unless the cluster refuses or an assigned node is gone."""
        cluster = self._cluster()
        ref = spec.ref
        existing = self._jobs(ref)
        if existing:
            owners = {job.workload_id for job in existing.values()}
            if owners != {spec.workload_id}:
                raise DispatchRefused(
                    RefusalReason.CONFLICT,
                    f"Jobs {sorted(existing)} in namespace {spec.namespace} on simulated "
                    f"cluster {self.name} belong to workload(s) {sorted(owners)}, "
                    f"not {spec.workload_id}",
                )
            if len(existing) == len(ref.job_names):
                return ref  # a retried dispatch: already created
        controls = self._refuse_or_controls(cluster)
        self._check_namespace(cluster, spec.namespace)
        self._check_spec(cluster, spec)
        self._create_jobs(cluster, spec, existing, may_fail=controls.get("fail_next", 0) > 0)
        return ref

    @transaction.atomic
    def _create_jobs(
        self, cluster: Any, spec: WorkloadSpec, existing: dict[str, Any], *, may_fail: bool
    ) -> None:
        from scheduling.backends.simulated.models import SimControl, SimJob

        connection = dict(cluster.connection or {})
        fail = False
        if may_fail:
            control = SimControl.objects.select_for_update().get(cluster=cluster)
            fail = control.fail_next > 0
            if fail:
                control.fail_next -= 1
                control.save(update_fields=["fail_next", "updated_at"])
        now = self.clock()
        fail_names = set(connection.get("fail") or [])
        rows = []
        for pod_set, name in zip(spec.pod_sets, spec.ref.job_names, strict=True):
            if name in existing:
                continue
            fails = fail or name in fail_names
            rows.append(self._new_job(cluster, spec, pod_set, name, connection, now,
                                      fails=fails, suspended=True, touched_at=now))
        try:
            with transaction.atomic():
                SimJob.objects.bulk_create(rows)
        except IntegrityError:
            # Another worker created them between our read and our write: same outcome.
            if set(self._jobs(spec.ref)) != set(spec.ref.job_names):
                raise

    @classmethod
    def _new_job(cls, cluster: Any, spec: Any, pod_set: Any, name: str,
                 connection: dict[str, Any], now: datetime, *, fails: bool, suspended: bool,
                 **moments: Any) -> Any:
        """An unsaved Job for one pod set of `spec` (created suspended, or already started)."""
        from scheduling.backends.simulated.models import SimJob

        labels = dict(spec.labels)
        duration_s = spec.duration_s
        if spec.kind:
            # Every kind runs as its pod sets; a serving kind (Deployment, StatefulSet,
            # LeaderWorkerSet, RayCluster) serves until deleted, whatever its hint says.
            labels[LABEL_KIND] = spec.kind
            kind = kinds.kind_named(spec.kind)
            if kind is not None and kind.serving:
                duration_s = None
        return SimJob(
            cluster=cluster, namespace=spec.namespace, name=name,
            workload_id=spec.workload_id, pod_set_index=pod_set.index,
            flavor=pod_set.flavor, pods=pod_set.count, gpus_per_pod=pod_set.gpus,
            cpu_per_pod=pod_set.cpu, memory_gib_per_pod=pod_set.memory_gib,
            nodes=list(pod_set.nodes), cards=list(pod_set.cards),
            priority_class=spec.priority_class,
            termination_grace_s=max(0, int(spec.termination_grace_s)),
            labels=labels, duration_s=duration_s,
            speedup=float(connection.get("speedup") or 1.0),
            start_delay_s=float(connection.get("start_delay_s") or 0.0),
            fail_after_s=cls._fail_after(connection, duration_s) if fails else None,
            suspended=suspended, created_at=now, **moments,
        )

    @staticmethod
    def _fail_after(connection: dict[str, Any], duration_s: float | None) -> float:
        if connection.get("fail_after_s") is not None:
            return float(connection["fail_after_s"])
        return duration_s / 2 if duration_s else 0.0

    def start_workload(self, ref: WorkloadRef) -> None:
        """Unsuspend: pods restart from the beginning, as a resumed Job's pods do."""
        from scheduling.backends.simulated.models import SimJob

        jobs = list(SimJob.objects.filter(
            cluster__name=self.name, namespace=ref.namespace, name__in=ref.job_names
        ))
        now = self.clock()
        started = [job for job in jobs if job.suspended]
        for job in started:
            job.suspended, job.started_at, job.suspended_at = False, now, None
            job.mark(now)
        SimJob.objects.bulk_update(
            started, ["suspended", "started_at", "suspended_at", "touched_at", "ready_at",
                      "done_at"])
        missing = sorted(set(ref.job_names) - {job.name for job in jobs})
        if missing:
            raise DispatchRefused(
                RefusalReason.JOB_GONE,
                f"Jobs {missing} in namespace {ref.namespace} on simulated cluster "
                f"{self.name} no longer exist",
            )

    def fail_job(self, *, namespace: str, job_name: str) -> bool:
        """Make a running Job fail now (a pod crashes); False if there is no such Job."""
        from scheduling.backends.simulated.models import SimJob

        with transaction.atomic():
            job = SimJob.objects.select_for_update().filter(
                cluster__name=self.name, namespace=namespace, name=job_name
            ).first()
            if job is None:
                return False
            ran = 0.0
            if not job.suspended and job.started_at is not None:
                elapsed = (self.clock() - job.started_at).total_seconds() * job.speedup
                ran = max(0.0, elapsed - job.start_delay_s)
            job.fail_after_s = ran
            job.mark(self.clock())
            job.save(update_fields=["fail_after_s", "touched_at", "ready_at", "done_at"])
            return True

    def suspend_workload(self, ref: WorkloadRef, grace_s: int) -> None:
        """Suspend; the pods' GPUs stay busy for the grace period (seen in the metrics)."""
        from scheduling.backends.simulated.models import SimJob

        now = self.clock()
        SimJob.objects.filter(
            cluster__name=self.name, namespace=ref.namespace, name__in=ref.job_names,
            suspended=False,
        ).update(suspended=True, suspended_at=now, termination_grace_s=max(0, int(grace_s)),
                 touched_at=now, ready_at=None, done_at=None)

    def delete_workload(self, ref: WorkloadRef) -> None:
        """Delete the SimJobs (missing ones are fine)."""
        from scheduling.backends.simulated.models import SimJob

        SimJob.objects.filter(
            cluster__name=self.name, namespace=ref.namespace, name__in=ref.job_names
        ).delete()
