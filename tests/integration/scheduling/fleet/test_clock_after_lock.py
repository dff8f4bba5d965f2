"""The workers' writers of workload states that wait for the scheduling lock (sync, dispatch
refusals, maintenance) and updates read their clock once they hold it: a cycle that wrote
while they waited comes first in the timeline, so no event or interval is stamped before the
decision it follows (an admission ending before it began is metered negative)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.fleet import dispatch, maintenance
from scheduling.fleet import sync as fleet_sync
from scheduling.models import EventType, Workload, WorkloadState
from scheduling.request import updates
from scheduling.services import workload_submit, workload_update
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.fakes import FakeBackend
from tests.integration.scheduling.world import make_world, request, submit

S = WorkloadState


@pytest.fixture
def world(db, settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False,
                              "stuck_running_s": 7200}
    return make_world(nodes_per_cluster=2)


@pytest.fixture
def lock_taken(monkeypatch):
    """Wrap the scheduling lock of `module`: the time it is granted, 20 ms after it was asked
    for (as if a cycle held it meanwhile), is recorded."""
    granted: list = []

    def wrap(module):
        real = module.scheduling_lock

        @contextlib.contextmanager
        def slow_lock(*, wait: bool) -> Iterator[bool]:
            with real(wait=wait) as got:
                time.sleep(0.02)
                granted.append(timezone.now())
                yield got

        monkeypatch.setattr(module, "scheduling_lock", slow_lock)
        return granted
    return wrap


def test_sync_stamps_what_it_saw_after_the_lock(world, backends, lock_taken):
    granted = lock_taken(fleet_sync)
    w = submit(world, "sync")
    cycle_run(wait=True)
    adm = w.admissions.get()
    dispatch.cluster_dispatch(cluster_id=adm.cluster_id)
    backends[adm.cluster.name].phase[w.pk] = "succeeded"
    assert fleet_sync.cluster_sync(cluster_id=adm.cluster_id, nodes=False).finished == [w.pk]
    assert w.events.get(type=EventType.FINISHED).at >= granted[-1]


def test_a_dispatch_refusal_is_stamped_after_the_lock(world, backends, lock_taken):
    granted = lock_taken(dispatch)
    w = submit(world, "refused")
    cycle_run(wait=True)
    adm = w.admissions.get()
    backends[adm.cluster.name] = FakeBackend(adm.cluster.name, refuse=True)
    assert dispatch.cluster_dispatch(cluster_id=adm.cluster_id).refused == [w.pk]
    adm.refresh_from_db()
    assert adm.ended_at >= granted[-1]
    assert w.events.get(type=EventType.REFUSED).at >= granted[-1]


def test_maintenance_stamps_a_reclaim_after_the_lock(world, backends, lock_taken):
    granted = lock_taken(maintenance)
    w = workload_submit(user=world.alice, data=request("hung"))
    cycle_run(wait=True)
    adm = w.admissions.get()
    dispatch.cluster_dispatch(cluster_id=adm.cluster_id)
    backends[adm.cluster.name].phase[w.pk] = "running"
    fleet_sync.cluster_sync(cluster_id=adm.cluster_id, nodes=False)
    Workload.objects.filter(pk=w.pk).update(
        state_changed_at=timezone.now() - timedelta(seconds=7300))
    assert maintenance.workloads_maintain().failed == [w.pk]
    adm.refresh_from_db()
    assert adm.ended_at >= granted[-1]
    assert w.events.get(type=EventType.RECLAIMED).at >= granted[-1]


def test_an_update_is_stamped_after_the_lock(world, lock_taken):
    granted = lock_taken(updates)
    w = workload_submit(user=world.alice, data=request("grow", gpus=4), nudge=False)
    workload_update(user=world.alice, workload=w, changes={"duration_hint_s": 7200})
    assert w.events.get(type=EventType.UPDATED).at >= granted[-1]
