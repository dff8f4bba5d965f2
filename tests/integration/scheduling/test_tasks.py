"""The Celery tasks (scheduling/tasks.py): the watch task runs the watch of each cluster,
schedules the capacity it frees and hands over to a fresh one; it can be turned off."""

from __future__ import annotations

import pytest

from scheduling import tasks
from scheduling.models import Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import make_world, request, running_workload

S = WorkloadState
# Tasks these in-process tests would send to a broker, recorded instead (conftest.py).
pytestmark = pytest.mark.usefixtures("sent")


@pytest.mark.django_db(transaction=True)
def test_the_watch_task_schedules_freed_capacity_and_hands_over(settings, sent):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "watch_interval_s": 0.05}
    world = make_world(speedup=100, cluster_names=("bj",), nodes_per_cluster=1)
    first, _ = running_workload(world, "first", duration_s=50)  # takes the node's 8 GPUs
    second = workload_submit(user=world.alice, data=request("second", duration_hint_s=50))
    cycle_run(wait=True)
    assert Workload.objects.get(pk=second.pk).state == S.PENDING
    tasks.watch_clusters(seconds=2.5)
    assert Workload.objects.get(pk=first.pk).state == S.FINISHED
    # The freed node went to the second at once (the watch ran the cycle and its dispatch).
    assert Workload.objects.get(pk=second.pk).state in (S.RUNNING, S.FINISHED)
    assert [name for name, _, _ in sent].count("scheduling.watch") == 1  # a fresh one takes over


def test_watch_can_be_turned_off(settings, monkeypatch):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "watch": False}
    called = []
    monkeypatch.setattr(tasks, "cluster_watch", lambda **kw: called.append(kw))
    tasks.watch_clusters(seconds=1)
    assert called == []


def test_the_periodic_eta_refresh_pauses_pace_times_its_duration(settings, monkeypatch):
    """A refresh that took 40 s (20,000 pending) is followed by 120 s without one (pace 3);
    a refresh that found nothing to do sets no pause."""
    from django.core.cache import cache

    from scheduling.workers.eta import EtaReport

    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "pace": 3.0}
    cache.delete(tasks.ETA_PAUSED_UNTIL_KEY)
    clock = [1_000_000.0]
    monkeypatch.setattr(tasks.time, "time", lambda: clock[0])
    runs: list[float] = []

    def refresh(seconds=40.0, skipped=False):
        def run():
            runs.append(clock[0])
            return EtaReport(skipped=skipped, pending=20_000, seconds=seconds)
        return run

    monkeypatch.setattr(tasks, "estimates_refresh", refresh())
    assert tasks.eta_refresh()["pending"] == 20_000
    for later in (60.0, 119.0):  # the beat's next two ticks fall in the pause
        clock[0] = 1_000_000.0 + later
        assert tasks.eta_refresh() == {"pending": 0, "estimated": 0, "seconds": 0.0}
    clock[0] = 1_000_000.0 + 121.0
    assert tasks.eta_refresh()["pending"] == 20_000
    assert len(runs) == 2
    monkeypatch.setattr(tasks, "estimates_refresh", refresh(skipped=True))
    clock[0] += 1000.0
    tasks.eta_refresh()
    clock[0] += 1.0
    tasks.eta_refresh()
    assert len(runs) == 4  # nothing to do: no pause
    cache.delete(tasks.ETA_PAUSED_UNTIL_KEY)


@pytest.mark.django_db
def test_the_periodic_sync_dispatches_each_cluster_with_stale_reserved_work_once(
        world_dispatch_after_commit, monkeypatch):
    """Three reservations left undispatched for a minute on one cluster make one dispatch pass
    of that cluster, not three; work that runs is no reason for a pass."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import Admission

    world = world_dispatch_after_commit
    for i in range(3):
        workload_submit(user=world.alice, data=request(f"r{i}", gpus=1))
    cycle_run(wait=True)
    reserved = Admission.objects.filter(ended_at__isnull=True, dispatched_at__isnull=True)
    assert reserved.count() == 3 and {a.workload.state for a in reserved} == {S.RESERVED}
    clusters = set(reserved.values_list("cluster_id", flat=True))
    assert len(clusters) == 1  # packed on one node
    reserved.update(reserved_at=timezone.now() - timedelta(minutes=1))
    monkeypatch.setattr(tasks, "cluster_sync", lambda **kw: type("R", (), {
        "finished": 0, "failed": 0, "lost": 0})())
    passes: list[int] = []
    monkeypatch.setattr(tasks, "cluster_dispatch", lambda **kw: passes.append(kw["cluster_id"]))
    tasks.sync_all()
    assert sorted(passes) == sorted(clusters)
    Workload.objects.filter(admissions__in=reserved).update(state=S.RUNNING)
    passes.clear()
    tasks.sync_all()
    assert passes == []
