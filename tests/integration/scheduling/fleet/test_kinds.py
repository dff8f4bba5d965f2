"""Workload kinds through the fleet: a manifest workload runs on a simulated cluster like any
other; a cluster that does not serve its kind refuses it at dispatch with the reason and it is
placed elsewhere; node sync records the kinds each cluster serves, and the fleet page shows
them."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from scheduling.backends import registry
from scheduling.backends.simulated.models import SimJob
from scheduling.fleet.dispatch import cluster_dispatch
from scheduling.fleet.sync import sync_nodes
from scheduling.models import Admission, Cluster, EventType, Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import request
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


def _lws(groups: int, size: int, gpus: int = 1) -> dict:
    obj = manifest("LeaderWorkerSet")
    obj["spec"]["replicas"] = groups
    lwt = obj["spec"]["leaderWorkerTemplate"]
    lwt["size"] = size
    for key in ("leaderTemplate", "workerTemplate"):
        resources = lwt[key]["spec"]["containers"][0]["resources"]
        resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(gpus)
    return obj


def test_each_lws_group_is_admitted_on_its_own_as_quota_allows(world):
    # vision may use 24 GPUs: 12 of the 20 groups of 2 pods of one GPU fit, the rest wait.
    api = APIClient()
    api.force_authenticate(world.alice)
    resp = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": _lws(20, 2),
                                          "duration_hint_s": 3600}, format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["name"] == "vllm-0" and len(body["gangs"]) == 20
    assert [g["name"] for g in body["gangs"]][-1] == "vllm-19"
    assert [p["count"] for p in body["pod_sets"]] == [1, 1]
    cycle_run(wait=True)
    groups = Workload.objects.filter(labels__contains={"allot.io/gang-of": "vllm"})
    running = [w for w in groups if w.state == S.RUNNING]
    pending = [w for w in groups if w.state == S.PENDING]
    assert (len(running), len(pending)) == (12, 8)
    assert {w.reason_code for w in pending} == {"QUOTA_MAX"}
    # Each admitted group runs whole on one cluster, as its own LeaderWorkerSet of one group.
    for w in running:
        admission = w.admissions.get(ended_at__isnull=True)
        assert len(admission.nodes) == 2 and admission.gpus == 2
        assert w.manifest["spec"]["replicas"] == 1
        assert [j.pods for j in SimJob.objects.filter(workload_id=w.pk)] == [1, 1]
    admitted = Admission.objects.filter(workload__in=groups, ended_at__isnull=True)
    assert sum(a.gpus for a in admitted) == 24  # quota counts the admitted groups only


def test_preemption_takes_whole_lws_groups(world):
    obj = _lws(12, 2)
    ws = workload_submit(user=world.alice, data={
        "queue": "rd/vision", "manifest": obj, "priority_class": "batch-low",
        "preemptible": True, "duration_hint_s": 3600}, nudge=False)
    assert ws.name == "vllm-0"
    cycle_run(wait=True)
    groups = Workload.objects.filter(labels__contains={"allot.io/gang-of": "vllm"})
    assert sorted({w.state for w in groups}) == [S.RUNNING]
    urgent = workload_submit(user=world.alice, data={
        "queue": "rd/vision", "name": "urgent", "priority_class": "inference-high",
        "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 3}], "image": "x",
        "command": ["serve"]}, nudge=False)
    cycle_run(wait=True)
    victims = [w for w in Workload.objects.filter(pk__in=[g.pk for g in groups])
               if w.state != S.RUNNING]
    # 3 GPUs free up only with two whole groups of 2: never one pod of a group.
    assert len(victims) == 2
    for w in victims:
        assert w.state in (S.PREEMPTING, S.PENDING)
        assert not w.admissions.filter(ended_at__isnull=True, dispatched_at__isnull=False
                                       ).exclude(workload__state=S.PREEMPTING).exists()
    urgent.refresh_from_db()
    assert urgent.state in (S.PENDING, S.RESERVED, S.RUNNING)


def _deployment(replicas: int, gpus: int = 8) -> dict:
    obj = manifest("Deployment")
    obj["spec"]["replicas"] = replicas
    res = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = str(gpus)
    return obj


def _scale(api, w, replicas: int):
    obj = copy.deepcopy(Workload.objects.get(pk=w.pk).manifest)
    obj["spec"]["replicas"] = replicas
    return api.patch(f"/api/v1/workloads/{w.pk}", {"manifest": obj}, format="json")


def _open(w) -> Admission:
    return Admission.objects.get(workload=w, ended_at__isnull=True)


def test_a_deployment_scaled_through_the_api_is_admitted_pod_by_pod(world):
    api = APIClient()
    api.force_authenticate(world.alice)
    w = workload_submit(user=world.alice, data={"queue": "rd/vision",
                                                "manifest": _deployment(4, gpus=4)}, nudge=False)
    workload_submit(user=world.alice, data=request("filler", gpus=8), nudge=False)
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING, (w.state, w.reason_message)
    assert _open(w).gpus == 16  # with the filler, vision's max (24) is used

    # Scaled up: the added pod is a new admission, waiting with its reason.
    resp = _scale(api, w, 5)
    assert resp.status_code == 200, resp.content
    up = Workload.objects.get(labels__contains={"allot.io/scale-of": str(w.pk)})
    assert (up.name, up.state) == ("infer-scale-1", S.PENDING)
    assert [(p.count, p.gpus) for p in up.pod_sets.all()] == [(1, 4)]
    assert up.labels["allot.io/cluster"] == _open(w).cluster.name
    cycle_run(wait=True)
    up.refresh_from_db()
    assert up.state == S.PENDING and up.reason_code == "QUOTA_MAX"
    assert _open(w).gpus == 16 and w.pod_sets.get().count == 4

    # Scaled down below what is admitted: the waiting pod is dropped and one admitted pod's
    # quota released at once (no cycle needed).
    assert _scale(api, w, 3).status_code == 200
    up.refresh_from_db()
    assert up.state == S.CANCELLED
    adm = _open(w)
    assert (adm.gpus, len(adm.nodes), w.pod_sets.get().count) == (12, 3, 3)
    assert SimJob.objects.get(workload_id=w.pk).pods == 3
    scaled = w.events.filter(type=EventType.UPDATED).order_by("pk").last()
    assert "4 -> 3 pods; the quota of 1 pods (4 GPUs) released" in scaled.message

    # Scaled up again with room: admitted by the next cycle, merged into the running one.
    assert _scale(api, w, 4).status_code == 200
    up2 = Workload.objects.get(labels__contains={"allot.io/scale-of": str(w.pk)},
                               state=S.PENDING)
    cycle_run(wait=True)
    up2.refresh_from_db()
    assert up2.state == S.RESERVED  # admitted; merged by the dispatch pass after the cycle
    cluster_dispatch(cluster_id=_open(w).cluster_id)
    up2.refresh_from_db()
    assert up2.state == S.FINISHED, (up2.state, up2.reason_message)
    assert "joined infer" in up2.events.get(type=EventType.FINISHED).message
    w.refresh_from_db()
    adm = _open(w)
    assert w.state == S.RUNNING and (adm.gpus, len(adm.nodes)) == (16, 4)
    assert w.pod_sets.get().count == 4
    assert SimJob.objects.get(workload_id=w.pk).pods == 4
    assert Workload.objects.get(pk=w.pk).manifest["spec"]["replicas"] == 4
    # Each size is its own admission interval (metering bills each for its own time).
    assert list(w.admissions.order_by("pk").values_list("gpus", flat=True)) == [16, 12, 16]

    # Scaled to zero: it holds nothing and keeps serving nothing until scaled up again.
    assert _scale(api, w, 0).status_code == 200
    assert (_open(w).gpus, _open(w).nodes) == (0, [])
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING


def test_a_running_deployment_may_change_only_its_replicas(world):
    api = APIClient()
    api.force_authenticate(world.alice)
    w = workload_submit(user=world.alice, data={"queue": "rd/vision",
                                                "manifest": _deployment(1)}, nudge=False)
    cycle_run(wait=True)
    obj = copy.deepcopy(Workload.objects.get(pk=w.pk).manifest)
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = "other:2"
    resp = api.patch(f"/api/v1/workloads/{w.pk}", {"manifest": obj}, format="json")
    assert resp.status_code == 400
    assert "only spec.replicas may change (1 now)" in resp.json()["manifest"][0]
    obj = copy.deepcopy(Workload.objects.get(pk=w.pk).manifest)
    obj["spec"]["replicas"] = "many"
    resp = api.patch(f"/api/v1/workloads/{w.pk}", {"manifest": obj}, format="json")
    assert resp.status_code == 400
    assert "'many' is not a whole number" in resp.json()["manifest.spec.replicas"][0]
    assert not Workload.objects.filter(labels__has_key="allot.io/scale-of").exists()
