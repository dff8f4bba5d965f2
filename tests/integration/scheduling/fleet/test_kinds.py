"""Workload kinds through the fleet: a manifest workload runs on a simulated cluster like any
other; a cluster that does not serve its kind refuses it at dispatch with the reason and it is
placed elsewhere; node sync records the kinds each cluster serves, and the fleet page shows
them."""

from __future__ import annotations

import pytest

from scheduling.backends import registry
from scheduling.backends.simulated.models import SimJob
from scheduling.fleet.sync import sync_nodes
from scheduling.models import Admission, Cluster, EventType, Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.manifests import manifest

S = WorkloadState


@pytest.fixture
def world(world_dispatch_in_cycle):
    return world_dispatch_in_cycle


def _submit(world, name: str) -> Workload:
    obj = manifest(name)
    return workload_submit(user=world.alice, data={
        "queue": "rd/vision", "manifest": obj, "duration_hint_s": 3600}, nudge=False)


def test_a_pytorchjob_runs_on_a_simulated_cluster(world):
    w = _submit(world, "PyTorchJob")
    assert w.state == S.PENDING
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING
    jobs = SimJob.objects.filter(workload_id=w.pk).order_by("pod_set_index")
    assert [j.pods for j in jobs] == [1, 3]
    assert {j.labels["allot.io/kind"] for j in jobs} == {"kubeflow.org/v1/PyTorchJob"}
    assert jobs[0].duration_s == 3600


def test_a_serving_kind_serves_until_deleted(world):
    obj = manifest("LeaderWorkerSet")
    obj["spec"]["replicas"] = 1
    obj["spec"]["leaderWorkerTemplate"]["size"] = 2
    w = workload_submit(user=world.alice, data={"queue": "rd/vision", "manifest": obj,
                                                "duration_hint_s": 3600}, nudge=False)
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING
    jobs = SimJob.objects.filter(workload_id=w.pk).order_by("pod_set_index")
    assert [j.pods for j in jobs] == [1, 1]
    assert {j.duration_s for j in jobs} == {None}


def test_a_kind_not_served_is_refused_and_placed_elsewhere(world):
    bj = Cluster.objects.get(name="bj")
    bj.connection = {**bj.connection, "kinds": ["batch/v1/Job"]}
    bj.save()
    sh = Cluster.objects.get(name="sh")
    sh.connection = {**sh.connection, "kinds": ["batch/v1/Job"]}
    sh.save()
    w = _submit(world, "RayJob")
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.PENDING
    refused = w.events.get(type=EventType.REFUSED)
    assert refused.payload["reason"] == "kind_not_served"
    assert "does not serve RayJob (ray.io/v1" in refused.message
    first = Admission.objects.get(workload=w).cluster
    other = sh if first == bj else bj
    other.connection = {k: v for k, v in other.connection.items() if k != "kinds"}
    other.save()
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING
    assert w.admissions.order_by("pk").last().cluster == other


def test_node_sync_records_served_kinds_and_the_fleet_page_shows_them(world, client):
    bj = Cluster.objects.get(name="bj")
    bj.connection = {**bj.connection, "kinds": ["batch/v1/Job", "ray.io/v1/RayJob",
                                                "batch.volcano.sh/v1alpha1/Job"]}
    bj.save()
    sync_nodes(bj, registry.get_backend(bj))
    bj.refresh_from_db()
    assert bj.kinds == ["batch.volcano.sh/v1alpha1/Job", "batch/v1/Job", "ray.io/v1/RayJob"]
    client.force_login(world.admin)
    page = client.get("/fleet/").content.decode()
    assert "Job (Volcano), Job, RayJob" in page
