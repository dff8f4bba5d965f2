"""Sync by watch (scheduling/fleet/watch.py, cluster_watch): the workers follow a simulated
cluster through its watch_workloads, run the cycle when capacity is freed, and keep the periodic
sync as the resync."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from scheduling import locks
from scheduling.fleet import watch as fleet_watch
from scheduling.models import EventType, Workload, WorkloadState
from tests.integration.scheduling.world import make_world, running_workload

S = WorkloadState
# Tasks these in-process tests would send to a broker, recorded instead (conftest.py).
pytestmark = pytest.mark.usefixtures("sent")


@pytest.mark.django_db
def test_a_watch_follows_the_cluster_and_frees_capacity_when_pods_end(settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "watch_interval_s": 0.05}
    world = make_world(speedup=100, cluster_names=("bj",))
    w, cluster_id = running_workload(world, "short", duration_s=50)  # 0.5 s of wall time
    freed = []
    report = fleet_watch.cluster_watch(cluster_id=cluster_id, seconds=2.0,
                                    on_freed=lambda: freed.append(1))
    w.refresh_from_db()
    assert report.watched and report.resyncs == 1 and report.ended == 1
    assert w.state == S.FINISHED and freed == [1]
    assert list(w.events.values_list("type", flat=True))[-3:] == [
        EventType.DISPATCHED, EventType.RUNNING, EventType.FINISHED]
    adm = w.admissions.get()
    # Seen within a few watch intervals of the end of its pods, not at the next resync.
    assert (adm.ended_at - adm.running_at).total_seconds() < 1.5


@pytest.mark.django_db
def test_a_quiet_cluster_costs_a_few_queries_per_look(settings, django_assert_max_num_queries):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "watch_interval_s": 0.05}
    from scheduling.backends import clear_backend_cache

    clear_backend_cache()
    # No overlap: the Job started just now is not reported again
    # (tests/integration/backends/simulated/test_status.py).
    world = make_world(speedup=1, cluster_names=("bj",), connection={"watch_overlap_s": 0})
    w, cluster_id = running_workload(world, "long", duration_s=3600)
    with django_assert_max_num_queries(60):  # ~1 s: a resync, then 3 queries per 0.1 s
        report = fleet_watch.cluster_watch(cluster_id=cluster_id, seconds=1.0)
    assert report.ended == 0 and Workload.objects.get(pk=w.pk).state == S.RUNNING


@pytest.mark.django_db(transaction=True)
def test_one_watcher_per_cluster_across_processes(settings):
    if connection.vendor != "postgresql":
        pytest.skip("the watch lock is a PostgreSQL advisory lock")
    world = make_world(speedup=1, cluster_names=("bj",))
    inside, release = threading.Event(), threading.Event()

    def hold():
        with locks.watch_lock(world.bj.pk) as got:
            assert got
            inside.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    try:
        assert fleet_watch.cluster_watch(cluster_id=world.bj.pk, seconds=5).watched is False
    finally:
        release.set()
        holder.join()
    assert fleet_watch.cluster_watch(cluster_id=world.bj.pk, seconds=0.2).watched is True
