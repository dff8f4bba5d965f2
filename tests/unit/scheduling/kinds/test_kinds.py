"""Pod-set derivation of every kind against hand-computed counts and requests, the request
arithmetic Kubernetes uses (requests else limits, init containers, sidecars), bad manifests
named by kind and path, and the object each kind is created as (held back, placed)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduling import kinds
from scheduling.kinds import ManifestError, Placement
from scheduling.kinds.base import ANNOTATION_ADMITTED, SCHEDULING_GATE, get, pod_requests
from tests.manifests import EXPECTED, NAMES, container, manifest, template


@pytest.mark.parametrize("name", NAMES)
def test_derived_pod_sets_match_hand_computed(name):
    obj = manifest(name)
    sets = kinds.kind_of(obj).derive(obj)
    got = [(s.name, s.count, s.cpu, s.memory_gib, s.gpus) for s in sets]
    assert got == [(n, c, Decimal(cpu), Decimal(mem), g) for n, c, cpu, mem, g in EXPECTED[name]]


def test_every_listed_kind_has_a_manifest():
    assert {kinds.kind_of(manifest(n)).key for n in NAMES} == set(kinds.KINDS)


def test_requests_else_limits_summed_over_containers():
    tpl = template(container("1", "1Gi", 1), container("500m", "512Mi", name="side",
                                                       limits_only=True))
    got = pod_requests("Job", tpl, "spec.template")
    assert got == {"cpu": Decimal("1.5"), "memory": Decimal(1536 * 2**20),
                   "nvidia.com/gpu": Decimal(1)}


def test_init_containers_as_kubernetes_counts_them():
    # Init containers run one at a time before the containers: the larger of the largest one
    # and the containers' sum. A sidecar (restartPolicy Always) keeps running: it adds.
    tpl = template(container("2", "1Gi"), container("1", "1Gi", name="b"),
                   initContainers=[container("4", "1Gi", name="fetch"),
                                   {**container("500m", "256Mi", name="proxy"),
                                    "restartPolicy": "Always"},
                                   container("3", "8Gi", name="warm")])
    got = pod_requests("Job", tpl, "spec.template")
    # cpu: containers 3 + sidecar 0.5 = 3.5 < fetch 4 -> 4 ("warm" 3 + 0.5 = 3.5)
    # memory: containers 2Gi + 256Mi < warm 8Gi + sidecar 256Mi -> 8.25Gi
    assert got["cpu"] == Decimal(4)
    assert got["memory"] == Decimal(8 * 2**30 + 256 * 2**20)


@pytest.mark.parametrize(("mutate", "path", "problem"), [
    (lambda o: o.update(kind="FooJob"), "apiVersion/kind", "unknown kind kubeflow.org/v1/FooJob"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="three"),
     "spec.pytorchReplicaSpecs.Worker.replicas", "'three' is not a whole number"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
        containers=[]), "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
     "no containers"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"]["requests"].update(cpu="lots"),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.requests.cpu",
     "'lots' is not a quantity"),
    (lambda o: o["spec"].pop("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs",
     "at least one replica type"),
])
def test_bad_manifests_name_kind_path_and_problem(mutate, path, problem):
    obj = manifest("PyTorchJob")
    mutate(obj)
    with pytest.raises(ManifestError) as err:
        kinds.kind_of(obj).derive(obj)
    assert err.value.path == path
    assert problem in err.value.problem
    assert err.value.kind in ("PyTorchJob", "FooJob")


def test_a_kind_of_another_api_version_is_named():
    obj = manifest("JobSet")
    obj["apiVersion"] = "jobset.x-k8s.io/v1alpha1"
    with pytest.raises(ManifestError, match=r"Allot runs JobSet of jobset.x-k8s.io/v1alpha2"):
        kinds.kind_of(obj)


def test_volcano_gang_larger_than_the_job_is_refused():
    obj = manifest("VolcanoJob")
    obj["spec"]["minAvailable"] = 4
    with pytest.raises(ManifestError, match=r"4 > 3 pods"):
        kinds.kind_of(obj).derive(obj)


def test_trainjob_needs_resources_per_node():
    obj = manifest("TrainJob")
    del obj["spec"]["trainer"]["resourcesPerNode"]
    with pytest.raises(ManifestError) as err:
        kinds.kind_of(obj).derive(obj)
    assert err.value.path == "spec.trainer.resourcesPerNode"


def _placements(n: int) -> list[Placement]:
    return [Placement(labels={"allot.io/pod-set": str(i)}, annotations={},
                      node_selector={"allot.io/flavor": "a100-80g"},
                      nodes=(f"node-{i}",), gpus=True, priority_class="training",
                      termination_grace_s=30) for i in range(n)]


@pytest.mark.parametrize("name", NAMES)
def test_prepared_object_is_held_back_and_placed(name):
    obj = manifest(name)
    kind = kinds.kind_of(obj)
    n = len(kind.derive(manifest(name)))
    made = kind.prepare(obj, name="allot-w7-0", namespace="rd-vision",
                        labels={"allot.io/workload-id": "7"}, annotations={},
                        placements=_placements(n))
    assert made["metadata"]["name"] == "allot-w7-0"
    assert made["metadata"]["namespace"] == "rd-vision"
    assert made["metadata"]["labels"]["allot.io/workload-id"] == "7"
    assert kind.suspended(made)
    assert obj == manifest(name)  # the stored manifest is left as it was
    if kind.suspend_path:
        assert get(made, kind.suspend_path) is True
    else:
        assert made["metadata"]["annotations"][ANNOTATION_ADMITTED] == "false"
    if kind.kind == "TrainJob":
        patch = made["spec"]["runtimePatches"][0]
        pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"]["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"allot.io/flavor": "a100-80g"}
        return
    for i, ps in enumerate(kind.derive(made)):
        spec = ps.template["spec"]
        assert spec["nodeSelector"]["allot.io/flavor"] == "a100-80g"
        assert ps.template["metadata"]["labels"]["allot.io/pod-set"] == str(i)
        terms = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][-1]["values"] == [f"node-{i}"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists",
                "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["priorityClassName"] == "training"
        gated = [g["name"] for g in spec.get("schedulingGates", [])]
        assert gated == ([] if kind.suspend_path else [SCHEDULING_GATE])


def test_rayjob_default_submitter_is_written_into_the_object():
    obj = manifest("RayJob")
    kind = kinds.kind_of(obj)
    made = kind.prepare(obj, name="allot-w1-0", namespace="ns", labels={}, annotations={},
                        placements=_placements(3))
    sub = made["spec"]["submitterPodTemplate"]["spec"]
    assert sub["nodeSelector"] == {"allot.io/flavor": "a100-80g"}
    assert sub["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}


def test_suspend_patches():
    assert kinds.KINDS["kubeflow.org/v1/PyTorchJob"].suspend_patch(False) == {
        "spec": {"runPolicy": {"suspend": False}}}
    assert kinds.KINDS["apps/v1/Deployment"].suspend_patch(False) == {
        "metadata": {"annotations": {ANNOTATION_ADMITTED: "true"}}}


@pytest.mark.parametrize(("name", "status", "succeeded", "failed"), [
    ("PyTorchJob", {"conditions": [{"type": "Succeeded", "status": "True"}]}, True, False),
    ("PyTorchJob", {"conditions": [{"type": "Failed", "status": "True", "reason": "OOM"}]},
     False, True),
    ("JobSet", {"conditions": [{"type": "Completed", "status": "True"}]}, True, False),
    ("TrainJob", {"conditions": [{"type": "Complete", "status": "True"}]}, True, False),
    ("RayJob", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, True, False),
    ("RayJob", {"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"}, False, True),
    ("RayJob", {"jobDeploymentStatus": "Running"}, False, False),
    ("VolcanoJob", {"state": {"phase": "Completed"}}, True, False),
    ("VolcanoJob", {"state": {"phase": "Aborted"}}, False, True),
    ("Deployment", {"availableReplicas": 3}, False, False),
])
def test_state_from_the_kinds_own_status(name, status, succeeded, failed):
    obj = {**manifest(name), "status": status}
    state = kinds.kind_of(obj).state(obj)
    assert (state.succeeded, state.failed) == (succeeded, failed)


def test_each_lws_replica_group_is_a_gang_of_its_own():
    lws = kinds.kind_of(manifest("LeaderWorkerSet"))
    gangs = lws.gangs(manifest("LeaderWorkerSet"))  # 2 groups of 4
    assert len(gangs) == 2
    for gang in gangs:
        assert gang["spec"]["replicas"] == 1
        assert [(s.name, s.count, s.gpus) for s in lws.derive(gang)] == [
            ("leader", 1, 8), ("workers", 3, 8)]
    gangs[0]["spec"]["leaderWorkerTemplate"]["size"] = 9  # copies, not one shared object
    assert gangs[1]["spec"]["leaderWorkerTemplate"]["size"] == 4
    one = manifest("LeaderWorkerSet")
    one["spec"]["replicas"] = 1
    assert lws.gangs(one) == [one]
    job = kinds.kind_of(manifest("PyTorchJob"))
    assert job.gangs(manifest("PyTorchJob")) == [manifest("PyTorchJob")]
