"""The workers' cycle, dispatch and sync driving a Kubernetes cluster (the API double): the
whole path a workload takes, seen from the cluster's side."""

import pytest

from scheduling.fleet import dispatch, teardown
from scheduling.fleet import sync as fleet_sync
from scheduling.models import EventType, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import request, world_on_kube
from tests.k8s_double import KubeDouble

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube():
    with KubeDouble() as double:
        yield double


@pytest.fixture
def world(kube):
    with world_on_kube(kube) as world:
        yield world


def test_a_workload_lives_its_life_as_kubernetes_jobs(world, kube):
    w = workload_submit(user=world.alice, data=request("k8s-life", count=2), nudge=False)
    assert cycle_run(wait=True).admitted == [w.pk]
    adm = w.admissions.get()

    assert dispatch.cluster_dispatch(cluster_id=world.bj.pk).started == [w.pk]
    job = kube.state.jobs[("rd-vision", f"allot-w{w.pk}-0")]
    assert job["spec"]["suspend"] is False  # created suspended, then started
    assert [r["body"]["spec"]["suspend"] for r in kube.requests("POST", r"/jobs$")] == [True]
    assert job["spec"]["parallelism"] == 2
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"allot.io/flavor": "a100-80g"}
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert pod["priorityClassName"] == "training"
    assert "training" in kube.state.priority_classes  # synced on first use
    node_terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert node_terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == sorted(
        set(adm.nodes))
    assert job["metadata"]["labels"]["allot.io/queue"] == "rd.vision"

    report = fleet_sync.cluster_sync(cluster_id=world.bj.pk)
    assert report.running == []  # pods still pending
    kube.state.set_pod_phases("rd-vision", f"allot-w{w.pk}-0", "Running")
    assert fleet_sync.cluster_sync(cluster_id=world.bj.pk).running == [w.pk]
    kube.state.set_pod_phases("rd-vision", f"allot-w{w.pk}-0", "Succeeded")
    assert fleet_sync.cluster_sync(cluster_id=world.bj.pk).finished == [w.pk]
    w.refresh_from_db()
    assert w.state == WorkloadState.FINISHED
    assert list(w.events.values_list("type", flat=True)) == [
        "submitted", "admitted", "dispatched", "running", "finished"]


def test_a_forbidden_namespace_is_a_refused_dispatch(world, kube):
    kube.forbid_namespace("rd-nlp")
    w = workload_submit(user=world.carol, data=request("nlp-job", queue="rd/nlp"), nudge=False)
    cycle_run(wait=True)
    assert dispatch.cluster_dispatch(cluster_id=world.bj.pk).refused == [w.pk]
    w.refresh_from_db()
    assert w.state == WorkloadState.PENDING
    refused = w.events.get(type=EventType.REFUSED)
    assert "namespace_forbidden" in refused.message
    assert 'namespace "rd-nlp" forbidden on cluster bj' in refused.message
    assert kube.state.jobs == {}


def test_preemption_suspends_the_jobs_and_says_why_on_them(world, kube):
    w = workload_submit(user=world.alice, data=request("victim"), nudge=False)
    cycle_run(wait=True)
    dispatch.cluster_dispatch(cluster_id=world.bj.pk)
    name = f"allot-w{w.pk}-0"
    kube.state.set_pod_phases("rd-vision", name, "Running")
    fleet_sync.cluster_sync(cluster_id=world.bj.pk)
    adm = w.admissions.get()
    w.events.create(at=adm.reserved_at, type=EventType.PREEMPTED,
                    message="preempted by workload 99 to reclaim 8 a100-80g GPUs")

    teardown.admissions_suspend(admission_ids=[adm.pk])
    assert kube.state.jobs[("rd-vision", name)]["spec"]["suspend"] is True
    assert kube.state.pods == {}
    described = kube.state.events_about("rd-vision", "Job", name)
    assert [(e["type"], e["reason"]) for e in described] == [("Warning", "Preempted")]
    assert described[0]["note"] == "preempted by workload 99 to reclaim 8 a100-80g GPUs"

    teardown.admission_delete(admission_id=adm.pk)
    assert kube.state.jobs == {}
