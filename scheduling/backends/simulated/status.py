"""What a simulated cluster runs, read on its clock: workload statuses (pods computed from the
time), the list of workloads, and the watch on the Jobs' marks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from scheduling.backends.base import PodSetStatus, WatchResult, WorkloadRef, WorkloadStatus
from scheduling.backends.naming import parse_job_name
from scheduling.backends.simulated.cluster import SimulatedCluster

# The longest a watch waits before looking again for Jobs written by other processes (a Job's
# own changes of state are looked for at their moment).
POLL_S = 0.25


class StatusMixin(SimulatedCluster):
    """workload_status, workload_statuses, list_workloads, watch_workloads."""

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
        born: dict[tuple[str, int], Any] = {}
        for namespace, name, created in SimJob.objects.filter(
                cluster__name=self.name).values_list("namespace", "name", "created_at"):
            parsed = parse_job_name(name)
            if parsed is not None:
                key = (namespace, parsed[0])
                grouped.setdefault(key, []).append((parsed[1], name))
                born[key] = min(created, born.get(key, created))
        return [
            WorkloadRef(namespace=ns, workload_id=wid,
                        job_names=tuple(n for _, n in sorted(names)),
                        created_at=born.get((ns, wid)))
            for (ns, wid), names in sorted(grouped.items())
        ]

    def watch_workloads(self, *, timeout_s: float, resource_version: str = "") -> WatchResult:
        """Wait until a Job of this cluster changes state (by the clock) or is created,
        started or suspended after the bookmark (an ISO timestamp); at most `timeout_s`.

        Two indexed queries per look (changes in the window, the next moment a pod changes
        state), whatever the number of Jobs; it looks again at that moment, or after at most
        `POLL_S` for Jobs written by other processes (a watcher per cluster runs all the time
        in a worker: looking every 0.1 s cost three clusters a tenth of a core under load).
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
            time.sleep(max(0.005, min(wait, left, POLL_S)))
