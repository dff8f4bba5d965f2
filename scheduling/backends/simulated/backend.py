"""The simulated backend: clusters from the database that run admitted workloads in real time.

A workload's Jobs are SimJob rows; pods pend for `start_delay_s`, run for the workload's
duration and succeed, all in simulated seconds (`speedup` simulated seconds per wall second).
The cluster is steered by `Cluster.connection`:

    {"speedup": 60, "start_delay_s": 5,          # clock and pod start latency
     "refuse": true,                              # refuse every dispatch
     "fail": ["allot-w12-0"], "fail_after_s": 30, # these Jobs fail after 30 s of running
     "forbidden_namespaces": ["ops"]}             # 403 on these namespaces

and at run time by its SimControl row (`manage.py sim_cluster NAME --refuse/--accept/
--fail-next N/--refuse-next N`). Nodes are the cluster's Node rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from core import db
from scheduling.backends.base import (
    BackendError,
    ClusterEventType,
    DispatchOutcome,
    DispatchRefused,
    FlavorMatch,
    NodeInfo,
    PodSetStatus,
    PriorityClassSpec,
    RefusalReason,
    WatchResult,
    WorkloadRef,
    WorkloadSpec,
    WorkloadStatus,
)
from scheduling.backends.naming import parse_job_name


class SimulatedBackend:
    """A simulated cluster whose state is in the database (shared by every process)."""

    # Its state lives in the scheduling database, so the scheduling cycle may dispatch to it
    # inside its own transaction (scheduling/dispatch.py, dispatch_in_cycle).
    joins_transaction = True

    def __init__(self, *, name: str, clock: Callable[[], datetime] | None = None,
                 watch_overlap_s: float = 0.0):
        self.name = name
        self.clock = clock or timezone.now
        # A bookmark is a wall-clock time, and a write committed just after a watch read may
        # carry an earlier time than the bookmark it returned. A watcher that must not miss it
        # until its next resync sets an overlap: changes that recent are reported again.
        self.watch_overlap_s = watch_overlap_s

    # -------------------------------------------------------------- helpers
    def _cluster(self) -> Any:
        from scheduling.models import Cluster

        try:
            return Cluster.objects.get(name=self.name)
        except Cluster.DoesNotExist:
            raise BackendError(
                f"simulated cluster {self.name} does not exist in the database", retryable=False
            ) from None

    def _jobs(self, ref: WorkloadRef) -> dict[str, Any]:
        from scheduling.backends.simulated.models import SimJob

        jobs = SimJob.objects.filter(
            cluster__name=self.name, namespace=ref.namespace, name__in=ref.job_names
        )
        return {job.name: job for job in jobs}

    # -------------------------------------------------------------- nodes
    def list_nodes(self, flavors: Sequence[FlavorMatch] | None = None) -> list[NodeInfo]:
        """The cluster's Node rows (a simulated cluster's inventory is what was declared)."""
        from scheduling.models import Node

        nodes = Node.objects.filter(cluster__name=self.name).select_related("flavor")
        return [
            NodeInfo(
                name=node.name, flavor=node.flavor.name, gpus=node.gpus, cpu=node.cpu,
                memory_gib=node.memory_gib, ready=node.ready, rack=node.rack,
                labels=dict(node.labels or {}),
            )
            for node in nodes.order_by("name")
        ]

    # -------------------------------------------------------------- namespaces
    def ensure_namespace(self, namespace: str) -> None:
        """Namespaces always exist, except those the connection forbids."""
        self._check_namespace(self._cluster(), namespace)

    def _check_namespace(self, cluster: Any, namespace: str) -> None:
        forbidden = (cluster.connection or {}).get("forbidden_namespaces") or []
        if namespace in forbidden:
            raise DispatchRefused(
                RefusalReason.NAMESPACE_FORBIDDEN,
                f'namespace "{namespace}" forbidden on simulated cluster {self.name}',
            )

    # -------------------------------------------------------------- workloads
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

    def _refuse_or_controls(self, cluster: Any) -> dict[str, Any]:
        """Raise the refusal the cluster is set to give; else its controls (or {})."""
        from scheduling.backends.simulated.models import SimControl

        if (cluster.connection or {}).get("refuse"):
            raise DispatchRefused(
                RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"
            )
        # One plain read on the common path; a row lock only when a countdown must move.
        controls: dict[str, Any] = dict(
            SimControl.objects.filter(cluster=cluster)
            .values("refuse", "refuse_next", "fail_next").first() or {}
        )
        if controls.get("refuse"):
            raise DispatchRefused(
                RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"
            )
        if controls.get("refuse_next"):
            refusal = None
            # The countdown is committed here, before the refusal is raised.
            with transaction.atomic():
                control = SimControl.objects.select_for_update().get(cluster=cluster)
                if control.refuse_next:
                    control.refuse_next -= 1
                    control.save(update_fields=["refuse_next", "updated_at"])
                    refusal = DispatchRefused(
                        RefusalReason.REFUSED,
                        f"simulated cluster {self.name} refused this dispatch (refuse-next; "
                        f"{control.refuse_next} more to refuse)",
                    )
            if refusal is not None:
                raise refusal
        return controls

    def _check_spec(self, cluster: Any, spec: WorkloadSpec,
                    ready: dict[str, bool] | None = None) -> None:
        from scheduling.models import Node

        if not spec.pod_sets or any(p.count < 1 for p in spec.pod_sets):
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"workload {spec.workload_id} has no pods to create "
                f"(pod counts {[p.count for p in spec.pod_sets]})",
            )
        speedup = float((cluster.connection or {}).get("speedup") or 1.0)
        if speedup <= 0:
            raise DispatchRefused(
                RefusalReason.INVALID,
                f"simulated cluster {self.name}: speedup must be > 0 (got {speedup:g})",
            )
        wanted_nodes = {n for p in spec.pod_sets for n in p.nodes}
        if not wanted_nodes:
            return
        if ready is None:
            ready = dict(
                Node.objects.filter(cluster=cluster, name__in=wanted_nodes)
                .values_list("name", "ready")
            )
        for node in sorted(wanted_nodes):
            if node not in ready:
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node} no longer exists on simulated cluster {self.name}",
                )
            if not ready[node]:
                raise DispatchRefused(
                    RefusalReason.NODE_GONE,
                    f"node {node} on simulated cluster {self.name} is not ready",
                )

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

        return SimJob(
            cluster=cluster, namespace=spec.namespace, name=name,
            workload_id=spec.workload_id, pod_set_index=pod_set.index,
            flavor=pod_set.flavor, pods=pod_set.count, gpus_per_pod=pod_set.gpus,
            cpu_per_pod=pod_set.cpu, memory_gib_per_pod=pod_set.memory_gib,
            nodes=list(pod_set.nodes), priority_class=spec.priority_class,
            termination_grace_s=max(0, int(spec.termination_grace_s)),
            labels=dict(spec.labels), duration_s=spec.duration_s,
            speedup=float(connection.get("speedup") or 1.0),
            start_delay_s=float(connection.get("start_delay_s") or 0.0),
            fail_after_s=cls._fail_after(connection, spec.duration_s) if fails else None,
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

    def dispatch_many(
        self, specs: Sequence[WorkloadSpec], *, replace: frozenset[int] = frozenset()
    ) -> list[DispatchOutcome]:
        """Create and start many workloads at once: a few queries for the whole batch.

        The same rules as create_workload + start_workload one by one (refusals, controls,
        nodes, conflicts, retried creates); the Jobs are written created-and-started in one
        transaction. Workloads in `replace` lose their previous Jobs of the same names first.
        Pods that run at once are reported running (`running`), so the caller need not wait
        for a watch to see it.
        """
        from scheduling.backends.simulated.models import SimControl, SimJob
        from scheduling.models import Node

        cluster = self._cluster()
        connection = dict(cluster.connection or {})
        outcomes: dict[int, DispatchOutcome] = {}

        def refuse(spec: WorkloadSpec, refusal: DispatchRefused) -> None:
            outcomes[spec.workload_id] = DispatchOutcome(ref=spec.ref, refused=refusal)

        todo = list(specs)
        with transaction.atomic():
            if connection.get("refuse"):
                for spec in todo:
                    refuse(spec, DispatchRefused(
                        RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"))
                todo = []
            controls = SimControl.objects.select_for_update().filter(cluster=cluster).first() \
                if todo else None
            if controls is not None and controls.refuse:
                for spec in todo:
                    refuse(spec, DispatchRefused(
                        RefusalReason.REFUSED, f"simulated cluster {self.name} refuses dispatches"))
                todo = []
            if controls is not None and controls.refuse_next and todo:
                n = min(controls.refuse_next, len(todo))
                for k, spec in enumerate(todo[:n]):
                    refuse(spec, DispatchRefused(
                        RefusalReason.REFUSED,
                        f"simulated cluster {self.name} refused this dispatch (refuse-next; "
                        f"{controls.refuse_next - k - 1} more to refuse)"))
                controls.refuse_next -= n
                controls.save(update_fields=["refuse_next", "updated_at"])
                todo = todo[n:]
            checked = []
            wanted = {n for spec in todo for p in spec.pod_sets for n in p.nodes}
            ready = dict(Node.objects.filter(cluster=cluster, name__in=wanted)
                         .values_list("name", "ready")) if wanted else {}
            for spec in todo:
                try:
                    self._check_namespace(cluster, spec.namespace)
                    self._check_spec(cluster, spec, ready=ready)
                except DispatchRefused as refusal:
                    refuse(spec, refusal)
                    continue
                checked.append(spec)
            if replace and checked:
                SimJob.objects.filter(cluster=cluster, workload_id__in=[
                    s.workload_id for s in checked if s.workload_id in replace]).delete()
            names = {n for spec in checked for n in spec.ref.job_names}
            existing: dict[tuple[str, str], Any] = {
                (job.namespace, job.name): job
                for job in SimJob.objects.filter(cluster=cluster, name__in=names)
            } if names else {}
            now = self.clock()
            fail_names = set(connection.get("fail") or [])
            fail_left = controls.fail_next if controls is not None else 0
            rows, restart = [], []
            for spec in checked:
                mine = [existing[(spec.namespace, n)] for n in spec.ref.job_names
                        if (spec.namespace, n) in existing]
                owners = {job.workload_id for job in mine}
                if owners - {spec.workload_id}:
                    refuse(spec, DispatchRefused(
                        RefusalReason.CONFLICT,
                        f"Jobs {sorted(j.name for j in mine)} in namespace {spec.namespace} on "
                        f"simulated cluster {self.name} belong to workload(s) {sorted(owners)}, "
                        f"not {spec.workload_id}"))
                    continue
                fails = False
                if len(mine) < len(spec.ref.job_names) and fail_left > 0:
                    fails, fail_left = True, fail_left - 1
                for job in mine:  # a retried dispatch: created already, start what is not
                    if job.suspended:
                        job.suspended, job.started_at, job.suspended_at = False, now, None
                        job.mark(now)
                        restart.append(job)
                have = {job.name for job in mine}
                for pod_set, name in zip(spec.pod_sets, spec.ref.job_names, strict=True):
                    if name in have:
                        continue
                    job = self._new_job(cluster, spec, pod_set, name, connection, now,
                                        fails=fails or name in fail_names, suspended=False,
                                        started_at=now)
                    job.mark(now)
                    rows.append(job)
                running = all(
                    j.pods_at(now).running >= j.pods
                    for j in [*[r for r in rows if r.workload_id == spec.workload_id], *mine])
                outcomes[spec.workload_id] = DispatchOutcome(ref=spec.ref, running=running)
            if controls is not None and fail_left != controls.fail_next:
                controls.fail_next = fail_left
                controls.save(update_fields=["fail_next", "updated_at"])
            db.insert_rows(SimJob, rows)
            if restart:
                SimJob.objects.bulk_update(
                    restart, ["suspended", "started_at", "suspended_at", "touched_at",
                              "ready_at", "done_at"])
        return [outcomes[spec.workload_id] for spec in specs]

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

    def workload_status(self, ref: WorkloadRef) -> WorkloadStatus:
        """Pods by state, computed from the clock."""
        return self.workload_statuses([ref])[0]

    def workload_statuses(self, refs: Sequence[WorkloadRef]) -> list[WorkloadStatus]:
        """Statuses of many workloads in one query."""
        from scheduling.backends.simulated.models import SimJob

        names = {name for ref in refs for name in ref.job_names}
        jobs = {
            (job.namespace, job.name): job
            for job in SimJob.objects.filter(cluster__name=self.name, name__in=names)
        }
        now = self.clock()
        statuses = []
        for ref in refs:
            sets = []
            for name in ref.job_names:
                job = jobs.get((ref.namespace, name))
                if job is None:
                    sets.append(PodSetStatus(job_name=name, exists=False))
                    continue
                pods = job.pods_at(now)
                sets.append(PodSetStatus(
                    job_name=name, exists=True, count=job.pods, suspended=pods.suspended,
                    pending=pods.pending, running=pods.running, succeeded=pods.succeeded,
                    failed=pods.failed, job_failed=pods.job_failed, message=pods.message,
                ))
            statuses.append(WorkloadStatus(ref=ref, pod_sets=tuple(sets)))
        return statuses

    def list_workloads(self) -> list[WorkloadRef]:
        """Every workload with SimJobs on this cluster."""
        from scheduling.backends.simulated.models import SimJob

        grouped: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for namespace, name in SimJob.objects.filter(cluster__name=self.name).values_list(
            "namespace", "name"
        ):
            parsed = parse_job_name(name)
            if parsed is not None:
                grouped.setdefault((namespace, parsed[0]), []).append((parsed[1], name))
        return [
            WorkloadRef(namespace=ns, workload_id=wid,
                        job_names=tuple(n for _, n in sorted(names)))
            for (ns, wid), names in sorted(grouped.items())
        ]

    def watch_workloads(self, *, timeout_s: float, resource_version: str = "") -> WatchResult:
        """Wait until a Job of this cluster changes state (by the clock) or is created,
        started or suspended after the bookmark (an ISO timestamp); at most `timeout_s`.

        Two indexed queries per look (changes in the window, the next moment a pod changes
        state), whatever the number of Jobs; it looks again at that moment, or after at most
        0.1 s for Jobs written by other processes.
        """
        from django.db.models import Q

        from scheduling.backends.simulated.models import SimJob

        jobs = SimJob.objects.filter(cluster_id=self._cluster().pk)
        if not resource_version:
            ids = frozenset(jobs.values_list("workload_id", flat=True).distinct())
            return WatchResult(changed=ids, resource_version=self.clock().isoformat())
        try:
            since = datetime.fromisoformat(resource_version)
        except ValueError:
            return WatchResult(frozenset(), "", expired=True)
        since -= timedelta(seconds=self.watch_overlap_s)
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            now = self.clock()
            changed = set(jobs.filter(
                Q(touched_at__gt=since) | Q(ready_at__gt=since, ready_at__lte=now)
                | Q(done_at__gt=since, done_at__lte=now)
            ).values_list("workload_id", flat=True).distinct())
            left = deadline - time.monotonic()
            if changed or left <= 0:
                return WatchResult(changed=frozenset(changed), resource_version=now.isoformat())
            moments = [m for m in (
                jobs.filter(ready_at__gt=now).order_by("ready_at")
                .values_list("ready_at", flat=True).first(),
                jobs.filter(done_at__gt=now).order_by("done_at")
                .values_list("done_at", flat=True).first()) if m is not None]
            wait = left if not moments else (min(moments) - now).total_seconds() + 0.005
            time.sleep(max(0.005, min(wait, left, 0.1)))

    # -------------------------------------------------------------- events
    def post_event(
        self, ref: WorkloadRef, type: ClusterEventType | str, reason: str, message: str
    ) -> None:
        """Store an Event about each existing Job of the workload."""
        from scheduling.backends.simulated.models import SimEvent

        event_type = ClusterEventType(type)
        jobs = self._jobs(ref)
        now = self.clock()
        SimEvent.objects.bulk_create([
            SimEvent(
                cluster_id=job.cluster_id, namespace=ref.namespace, job_name=name,
                type=event_type.value, reason=reason[:128], note=message[:1024], at=now,
            )
            for name, job in sorted(jobs.items())
        ])

    # -------------------------------------------------------------- priority classes
    def sync_priority_classes(self, classes: Sequence[PriorityClassSpec]) -> None:
        """Remember the classes (as a real cluster would hold them)."""
        from scheduling.backends.simulated.models import SimControl

        with transaction.atomic():
            control, _ = SimControl.objects.select_for_update().get_or_create(
                cluster=self._cluster()
            )
            stored = dict(control.priority_classes or {})
            for pc in classes:
                stored[pc.name] = {
                    "value": pc.value, "description": pc.description,
                    "preemption_policy": pc.preemption_policy,
                }
            if stored != control.priority_classes:
                control.priority_classes = stored
                control.save(update_fields=["priority_classes", "updated_at"])
