"""Writes that steer a simulated cluster (used by `manage.py sim_cluster` and tests)."""

from __future__ import annotations

from django.db import transaction

from scheduling.backends.simulated.models import SimControl, SimJob


class SimClusterError(ValueError):
    """A control request that names something that does not exist."""


def _simulated_cluster(name: str):  # type: ignore[no-untyped-def]
    from scheduling.models import BackendKind, Cluster

    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
        raise SimClusterError(f"no cluster named {name!r} (clusters: {known})")
    if cluster.backend != BackendKind.SIMULATED:
        raise SimClusterError(
            f"cluster {name} uses the {cluster.backend} backend, not the simulated one"
        )
    return cluster


@transaction.atomic
def sim_control_set(
    *,
    cluster_name: str,
    refuse: bool | None = None,
    refuse_next: int | None = None,
    fail_next: int | None = None,
) -> SimControl:
    """Set a simulated cluster's switches; None leaves a switch as it is."""
    for label, count in (("refuse_next", refuse_next), ("fail_next", fail_next)):
        if count is not None and count < 0:
            raise SimClusterError(f"{label} must be 0 or more (got {count})")
    cluster = _simulated_cluster(cluster_name)
    control, _ = SimControl.objects.select_for_update().get_or_create(cluster=cluster)
    if refuse is not None:
        control.refuse = refuse
    if refuse_next is not None:
        control.refuse_next = refuse_next
    if fail_next is not None:
        control.fail_next = fail_next
    control.save()
    return control


@transaction.atomic
def sim_job_fail(*, cluster_name: str, job_name: str) -> list[SimJob]:
    """Make a Job (in whatever namespace) fail now, as if a pod crashed."""
    from scheduling.backends.simulated.backend import SimulatedBackend

    cluster = _simulated_cluster(cluster_name)
    jobs = list(SimJob.objects.filter(cluster=cluster, name=job_name))
    if not jobs:
        raise SimClusterError(f"no Job named {job_name} on simulated cluster {cluster_name}")
    backend = SimulatedBackend(name=cluster.name)
    for job in jobs:
        backend.fail_job(namespace=job.namespace, job_name=job.name)
    return list(SimJob.objects.filter(pk__in=[j.pk for j in jobs]))
