"""Submission from a manifest (scheduling/request/manifests.py) through the API: the kind and
the derived pod sets in the answer, the manifest kept for dispatch, bad manifests a 400
naming the kind, the path and the problem with nothing saved."""

from __future__ import annotations

import copy

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from quotas.models import Flavor
from scheduling.models import Workload
from tests.manifests import manifest

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_pytorchjob_manifest_is_queued_with_derived_pods(world):
    api = client_for(world.alice)
    resp = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest":
                                          manifest("PyTorchJob"), "priority_class": "training",
                                          "duration_hint_s": 600}, format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["kind"] == "kubeflow.org/v1/PyTorchJob"
    assert body["name"] == "resnet-ddp"  # the manifest's name
    assert body["state"] == "pending"
    assert [(p["count"], p["gpus"], p["cpu"], p["memory_gib"]) for p in body["pod_sets"]] == [
        (1, 4, 8.0, 64.0), (3, 4, 8.0, 64.0)]
    assert body["gpus"] == 16
    assert [(p["name"], p["count"], p["path"]) for p in body["derived_pods"]] == [
        ("Master", 1, "spec.pytorchReplicaSpecs.Master.template"),
        ("Worker", 3, "spec.pytorchReplicaSpecs.Worker.template")]
    assert body["derived_pods"][0]["requests"] == {"cpu": 8.0, "memory_gib": 64.0, "gpus": 4}
    w = Workload.objects.get(pk=body["id"])
    assert w.kind == "kubeflow.org/v1/PyTorchJob" and w.manifest == manifest("PyTorchJob")
    assert api.get(f"/api/v1/workloads/{w.pk}").json()["derived_pods"] == body["derived_pods"]


def test_flavors_named_or_matched_by_node_selector(world):
    api = client_for(world.alice)
    obj = manifest("Job")
    obj["spec"]["template"]["spec"]["nodeSelector"] = {"allot.io/flavor": "a100-80g"}
    body = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": obj},
                    format="json").json()
    assert body["pod_sets"][0]["flavors"] == ["a100-80g"]
    body = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": manifest("Job"),
                                          "name": "named", "flavors": ["a100-80g"]},
                    format="json").json()
    assert body["pod_sets"][0]["flavors"] == ["a100-80g"] and body["name"] == "named"


def test_other_resources_are_kept_beside_the_pod_set(world):
    from scheduling.request.manifests import validate_manifest
    obj = manifest("Job")
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "rdma/ib"] = "1"
    errors: dict = {}
    flavors = {"a100-80g": Flavor.objects.get(name="a100-80g")}
    out = validate_manifest({"manifest": obj}, flavors, errors,
                            limits={"pod_sets": 8, "pods": 10, "gpus": 8, "cpu": 64,
                                    "memory_gib": 512})
    assert errors == {}
    assert out["pods"][0]["resources"] == {"rdma/ib": 1000}  # thousandths of a count


@pytest.mark.parametrize(("mutate", "key", "words"), [
    (lambda o: o.update(kind="FooJob"), "manifest.apiVersion/kind",
     ["FooJob", "unknown kind"]),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
        containers=[]), "manifest.spec.pytorchReplicaSpecs.Worker.template.spec.containers",
     ["PyTorchJob", "no containers"]),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"]["requests"].update(memory="a lot"),
     "manifest.spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources."
     "requests.memory", ["PyTorchJob", "'a lot' is not a quantity"]),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="3"),
     "manifest.spec.pytorchReplicaSpecs.Worker.replicas",
     ["PyTorchJob", "'3' is not a whole number"]),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=20000),
     "manifest.spec.pytorchReplicaSpecs.Worker.template", ["20000 pods > 10000"]),
])
def test_bad_manifest_is_400_naming_kind_path_problem_nothing_saved(world, mutate, key, words):
    obj = manifest("PyTorchJob")
    mutate(obj)
    before = Workload.objects.count()
    resp = client_for(world.alice).post("/api/v1/workloads", {"queue": "rd/vision",
                                                              "manifest": obj}, format="json")
    assert resp.status_code == 400, resp.content
    text = str(resp.json())
    assert key in text, text
    assert all(w in text for w in words), text
    assert Workload.objects.count() == before


def test_manifest_and_pods_together_is_400(world):
    resp = client_for(world.alice).post("/api/v1/workloads", {
        "queue": "rd/vision", "manifest": manifest("Job"), "image": "x",
        "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 1}]}, format="json")
    assert resp.status_code == 400
    assert "either a manifest or pods" in str(resp.json())


def test_update_and_resubmit_keep_the_manifest(world):
    from scheduling import services
    api = client_for(world.alice)
    body = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest":
                                          manifest("PyTorchJob")}, format="json").json()
    w = Workload.objects.get(pk=body["id"])
    bigger = manifest("PyTorchJob")
    bigger["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    out = services.workload_update(user=world.alice, workload=w, changes={"manifest": bigger})
    assert out.changed == ["manifest"]
    assert [p.count for p in out.workload.pod_sets.all()] == [1, 1]
    assert out.workload.manifest == bigger
    services.workload_cancel(user=world.alice, workload=out.workload)
    again = services.workload_resubmit(user=world.alice, workload=out.workload)
    assert again.kind == "kubeflow.org/v1/PyTorchJob" and again.manifest == bigger
    assert [p.count for p in again.pod_sets.all()] == [1, 1]


def test_a_leaderworkerset_is_a_workload_per_replica_group(world):
    api = client_for(world.alice)
    obj = manifest("LeaderWorkerSet")
    obj["spec"]["leaderWorkerTemplate"]["size"] = 2
    resp = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": obj},
                    format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert [g["name"] for g in body["gangs"]] == ["vllm-0", "vllm-1"]
    assert body["gangs"][0]["id"] == body["id"] and body["name"] == "vllm-0"
    groups = Workload.objects.filter(pk__in=[g["id"] for g in body["gangs"]]).order_by("pk")
    for n, w in enumerate(groups):
        assert w.state == "pending" and w.kind == "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"
        assert w.labels == {"allot.io/gang-of": "vllm", "allot.io/gang": str(n)}
        assert w.manifest["spec"]["replicas"] == 1
        assert [(p.count, p.gpus) for p in w.pod_sets.order_by("index")] == [(1, 8), (1, 8)]
        assert w.gpus == 16  # one group: a leader and a worker of 8 GPUs
    detail = api.get(f"/api/v1/workloads/{body['id']}").json()
    assert [(p["name"], p["count"]) for p in detail["derived_pods"]] == [
        ("leader", 1), ("workers", 1)]


def test_lws_group_names_too_long_is_400_nothing_saved(world):
    api = client_for(world.alice)
    obj = manifest("LeaderWorkerSet")
    obj["spec"]["replicas"] = 100
    resp = api.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": obj,
                                          "name": "x" * 62}, format="json")
    assert resp.status_code == 400
    problem = resp.json()["name"][0]
    assert "100 LeaderWorkerSet groups" in problem and "65 characters > 63" in problem
    assert not Workload.objects.exists()


def test_an_lws_preview_judges_one_group(world):
    # 20 groups of a leader and a worker of 8 GPUs: 320 GPUs in all never fit one cluster,
    # but each group is a workload of its own, and one group (16 GPUs) fits.
    api = client_for(world.alice)
    obj = manifest("LeaderWorkerSet")
    obj["spec"]["replicas"] = 20
    obj["spec"]["leaderWorkerTemplate"]["size"] = 2
    resp = api.post("/api/v1/workloads/preview", {"queue": "rd/vision", "manifest": obj},
                    format="json")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["gpus"] == "16"
    assert body["flavors"][0]["possible"] is True and body["flavor"] == "a100-80g"
    assert not Workload.objects.exists()


def test_an_lws_group_stays_one_group_when_updated(world):
    from scheduling import services

    obj = manifest("LeaderWorkerSet")
    obj["spec"]["leaderWorkerTemplate"]["size"] = 2
    body = client_for(world.alice).post("/api/v1/workloads", {
        "queue": "rd/vision", "manifest": obj}, format="json").json()
    w = Workload.objects.get(pk=body["id"])
    more = copy.deepcopy(w.manifest)
    more["spec"]["replicas"] = 3
    with pytest.raises(ValidationError) as caught:
        services.workload_update(user=world.alice, workload=w, changes={"manifest": more})
    assert "vllm-0 is one group of vllm: its replicas stay 1" in str(
        caught.value.message_dict["manifest.spec.replicas"])
    assert Workload.objects.get(pk=w.pk).manifest["spec"]["replicas"] == 1
