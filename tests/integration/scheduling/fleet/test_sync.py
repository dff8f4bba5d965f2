"""Sync (scheduling/fleet/sync.py): the workers follow a dispatched workload on its cluster (a
fake backend) to its end, finished or failed."""

from __future__ import annotations

import pytest

from scheduling.fleet import dispatch
from scheduling.fleet import sync as fleet_sync
from scheduling.models import EndReason, EventType, WorkloadState
from scheduling.selectors import queue_usage
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import submit

S = WorkloadState


@pytest.fixture
def world(world_dispatch_after_commit):
    """Dispatch after commit (conftest.py): the cycle only reserves."""
    return world_dispatch_after_commit


def test_dispatch_and_sync_follow_the_workload_to_the_end(world, backends):
    w = submit(world, "life", count=2)
    cycle_run(wait=True)
    adm = w.admissions.get()
    assert dispatch.cluster_dispatch(cluster_id=adm.cluster_id).started == [w.pk]
    fake = backends[adm.cluster.name]
    assert fake.calls[:2] == [("create", w.pk), ("start", w.pk)]
    spec = fake.specs[w.pk]
    assert spec.namespace == "rd-vision" and spec.pod_sets[0].nodes == tuple(adm.nodes)
    assert spec.duration_s == 3600 and spec.priority_class == "training"
    fake.phase[w.pk] = "running"
    assert fleet_sync.cluster_sync(cluster_id=adm.cluster_id, nodes=False).running == [w.pk]
    fake.phase[w.pk] = "succeeded"
    assert fleet_sync.cluster_sync(cluster_id=adm.cluster_id, nodes=False).finished == [w.pk]
    w.refresh_from_db()
    adm.refresh_from_db()
    assert w.state == S.FINISHED and adm.end_reason == EndReason.FINISHED
    assert list(w.events.values_list("type", flat=True)) == [
        "submitted", "admitted", "dispatched", "running", "finished"]
    assert queue_usage()["rd/vision"][("a100-80g", "gpu")]["used"] == 0


def test_failed_pods_fail_the_workload(world, backends):
    w = submit(world, "oom")
    cycle_run(wait=True)
    adm = w.admissions.get()
    dispatch.cluster_dispatch(cluster_id=adm.cluster_id)
    backends[adm.cluster.name].phase[w.pk] = "failed"
    assert fleet_sync.cluster_sync(cluster_id=adm.cluster_id, nodes=False).failed == [w.pk]
    w.refresh_from_db()
    assert w.state == S.FAILED
    assert "OOMKilled" in w.events.get(type=EventType.FAILED).message
