"""Dispatch (scheduling/fleet/dispatch.py): after the cycle commits (`cluster_dispatch`, here
on a fake backend that refuses), and inside the cycle for simulated clusters, whose state is in
this database (`dispatch_in_cycle`)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.backends.simulated.models import SimJob
from scheduling.backends.simulated.services import sim_control_set
from scheduling.fleet import dispatch
from scheduling.models import Admission, Cluster, EndReason, EventType, Workload, WorkloadState
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.fakes import FakeBackend
from tests.integration.scheduling.world import submit

S = WorkloadState


@pytest.fixture
def world(world_dispatch_in_cycle):
    """Dispatch inside the cycle (conftest.py). A cluster on the fake backend (`backends`)
    does not join the cycle's transaction, so it is dispatched after commit all the same."""
    return world_dispatch_in_cycle


def test_refused_dispatch_releases_penalises_and_places_elsewhere(world, backends):
    w = submit(world, "r1")
    cycle_run(wait=True)
    first = w.admissions.get()
    backends[first.cluster.name] = FakeBackend(first.cluster.name, refuse=True)
    result = dispatch.cluster_dispatch(cluster_id=first.cluster_id)
    assert result.refused == [w.pk]
    w.refresh_from_db()
    first.refresh_from_db()
    assert w.state == S.PENDING and first.end_reason == EndReason.REFUSED
    cluster = Cluster.objects.get(pk=first.cluster_id)
    assert cluster.effective_health(timezone.now()) == pytest.approx(0.4)
    types = list(w.events.values_list("type", flat=True))
    assert types[-2:] == [EventType.REFUSED, EventType.REQUEUED]
    assert "refused the dispatch" in w.events.get(type=EventType.REFUSED).message
    cycle_run(wait=True)
    second = w.admissions.get(ended_at__isnull=True)
    assert second.cluster_id != first.cluster_id
    assert dispatch.cluster_dispatch(cluster_id=second.cluster_id).started == [w.pk]


def test_the_cycle_reserves_creates_and_starts_in_one_transaction(world):
    ws = [submit(world, f"w{i}", gpus=1) for i in range(6)]
    report = cycle_run(wait=True)
    assert sorted(report.admitted) == sorted(w.pk for w in ws)
    assert report.dispatch_clusters == set()  # nothing left for a dispatch pass
    for w in ws:
        w.refresh_from_db()
        adm = w.admissions.get()
        assert w.state == S.RUNNING
        assert adm.reserved_at == adm.dispatched_at == adm.running_at
        assert list(w.events.values_list("type", flat=True)) == [
            "submitted", "admitted", "dispatched", "running"]
        job = SimJob.objects.get(workload_id=w.pk)
        assert not job.suspended and job.nodes == adm.nodes and job.namespace == "rd-vision"
        assert job.duration_s == 3600 and job.priority_class == "training"


def test_a_refusal_in_the_cycle_releases_penalises_and_requeues(world):
    sim_control_set(cluster_name="bj", refuse=True)
    sim_control_set(cluster_name="sh", refuse=True)
    w = submit(world, "nope")
    report = cycle_run(wait=True)
    w.refresh_from_db()
    assert report.refused == [w.pk] and w.state == S.PENDING
    adm = w.admissions.get()
    assert adm.end_reason == EndReason.REFUSED and adm.ended_at is not None
    assert list(w.events.values_list("type", flat=True))[-3:] == [
        EventType.ADMITTED, EventType.REFUSED, EventType.REQUEUED]
    cluster = Cluster.objects.get(pk=adm.cluster_id)
    assert cluster.effective_health(timezone.now()) == pytest.approx(0.4)
    assert w.reason_code == "DISPATCH_REFUSED"
    assert not SimJob.objects.exists()
    # The next cycle places it on the other (healthier) cluster, which refuses too.
    cycle_run(wait=True)
    assert Admission.objects.filter(workload=w).exclude(cluster_id=adm.cluster_id).exists()


def test_a_crash_mid_cycle_leaves_no_reservation_and_no_job(world):
    submit(world, "a")

    from scheduling.fleet import dispatch

    real = dispatch.dispatch_in_cycle

    def crash_after(**kwargs):
        real(**kwargs)
        raise RuntimeError("crash after the Jobs were created")

    dispatch.dispatch_in_cycle = crash_after
    try:
        with pytest.raises(RuntimeError, match="crash after"):
            cycle_run(wait=True)
    finally:
        dispatch.dispatch_in_cycle = real
    assert not SimJob.objects.exists() and not Admission.objects.exists()
    assert Workload.objects.get().state == S.PENDING


def test_turned_off_the_cycle_only_reserves(world, settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    w = submit(world, "later")
    report = cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RESERVED and report.dispatch_clusters
    assert not SimJob.objects.exists()
