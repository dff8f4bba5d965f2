"""Reasons posted on a simulated cluster: SimEvent rows about each Job of a workload (what
`kubectl describe job` would list)."""

from __future__ import annotations

from scheduling.backends.base import ClusterEventType, WorkloadRef
from scheduling.backends.simulated.cluster import SimulatedCluster


class EventsMixin(SimulatedCluster):
    """post_event."""

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
