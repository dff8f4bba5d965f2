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
