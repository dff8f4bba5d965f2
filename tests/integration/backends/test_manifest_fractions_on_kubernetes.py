"""A manifest asking a share of a card its sharing mechanism's way, end to end: submitted
through the API, counted as a fraction (the answer, the admission, the quota), dispatched to a
KAI cluster (the API double) as KAI reads it; a HAMi-style share gets KAI's fields instead."""

import pytest
from rest_framework.test import APIClient

from scheduling.fleet import dispatch
from scheduling.models import Workload
from scheduling.selectors import queue_usage
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import world_on_kube
from tests.k8s_double import KubeDouble

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube():
    with KubeDouble() as double:
        yield double


@pytest.fixture
def world(kube):
    with world_on_kube(kube, gpu_sharing="kai", kai_queue="research") as world:
        yield world


def _job(name: str, *, annotations=None, limits=None) -> dict:
    resources = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": dict(limits or {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 2, "completions": 2, "template": {
                "metadata": {"annotations": dict(annotations or {})},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "ghcr.io/example/train:1",
                     "resources": resources}]}}}}


def _submit(world, obj) -> dict:
    api = APIClient()
    api.force_authenticate(world.alice)
    resp = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": obj,
                                          "duration_hint_s": 600}, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()


def test_a_kai_fractional_job_runs_on_a_kai_cluster_as_half_cards(world, kube):
    body = _submit(world, _job("half", annotations={"gpu-fraction": "0.5"}))
    assert [(p["count"], p["gpus"], p["gpu_memory_gib"]) for p in body["pod_sets"]] == [
        (2, 0.5, None)]
    assert body["gpus"] == 1  # 2 pods x 0.5
    assert body["derived_pods"][0]["requests"]["gpus"] == 0.5

    assert cycle_run(wait=True).admitted == [body["id"]]
    w = Workload.objects.get(pk=body["id"])
    adm = w.admissions.get()
    assert adm.gpus == 1 and all(c is not None for c in adm.cards)  # a card each, shared
    assert queue_usage()["rd/vision"][("a100-80g", "gpu")]["used"] == 1

    assert dispatch.cluster_dispatch(cluster_id=world.bj.pk).started == [w.pk]
    job = kube.state.jobs[("rd-vision", f"allot-w{w.pk}-0")]
    assert job["spec"]["parallelism"] == 2
    assert job["metadata"]["labels"]["kai.scheduler/queue"] == "research"
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "research"
    resources = pod["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in resources.get("limits", {})
    assert "nvidia.com/gpu" not in resources.get("requests", {})


def test_a_hami_share_reaches_a_kai_cluster_as_kais_fraction(world, kube):
    body = _submit(world, _job("hami", limits={"nvidia.com/gpu": "1",
                                               "nvidia.com/gpucores": "30",
                                               "nvidia.com/gpumem": "16384"}))
    # 30 % of the cores: 0.3 of a card, with a 16 GiB slice.
    assert [(p["gpus"], p["gpu_memory_gib"], p["resources"]) for p in body["pod_sets"]] == [
        (0.3, 16, {})]
    cycle_run(wait=True)
    dispatch.cluster_dispatch(cluster_id=world.bj.pk)
    pod = kube.state.jobs[("rd-vision", f"allot-w{body['id']}-0")]["spec"]["template"]
    assert pod["metadata"]["annotations"]["gpu-memory"] == "16384"  # KAI's slice, in MiB
    assert "gpu-fraction" not in pod["metadata"]["annotations"]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert not {"nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/gpumem"} & set(limits)


@pytest.mark.parametrize(("annotations", "limits", "key", "words"), [
    ({"gpu-fraction": "1.5"}, None, "manifest.spec.template.metadata.annotations.gpu-fraction",
     "Job: 1.5 is not a fraction of one card"),
    (None, {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"},
     "manifest.spec.template.spec.containers[0].resources.limits.nvidia.com/gpu",
     "Job: 2 cards with nvidia.com/gpucores"),
    (None, {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"},
     "manifest.spec.template.spec.containers[0].resources.limits.nvidia.com/gpucores",
     "Job: 0 is out of range (1..100 percent)"),
])
def test_a_bad_share_is_a_400_naming_kind_path_problem_nothing_saved(
        world, annotations, limits, key, words):
    api = APIClient()
    api.force_authenticate(world.alice)
    resp = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": _job(
        "bad", annotations=annotations, limits=limits)}, format="json")
    assert resp.status_code == 400
    assert any(words in m for m in resp.json()[key]), resp.json()
    assert not Workload.objects.filter(name="bad").exists()


def test_a_memory_slice_alone_is_counted_on_the_flavors_card(world):
    body = _submit(world, _job("slice", annotations={"gpu-memory": "20480"}))
    # 20480 MiB of an a100-80g card (80 GiB = 81920 MiB): 0.25, a 20 GiB slice.
    assert [(p["gpus"], p["gpu_memory_gib"]) for p in body["pod_sets"]] == [(0.25, 20)]
    assert body["derived_pods"][0]["requests"]["gpus"] is None
    assert body["derived_pods"][0]["requests"]["gpu_memory_mib"] == 20480
