"""scheduling.backends.naming: Job and pod names, and the labels that link back to Allot."""

import pytest

from scheduling.backends.naming import (
    PodOwners,
    adopted_group,
    job_labels,
    job_name,
    parse_job_name,
    parse_pod_name,
    pod_name,
)


def test_job_and_pod_names_round_trip():
    assert job_name(42, 1) == "allot-w42-1"
    assert pod_name("allot-w42-1", 3) == "allot-w42-1-3"
    assert parse_job_name("allot-w42-1") == (42, 1)
    assert parse_job_name("other-job") is None
    assert parse_pod_name("allot-w42-1-3") == (42, 1)
    # A real Kubernetes pod name carries a random suffix after the Job name.
    assert parse_pod_name("allot-w42-1-x7k2p") == (42, 1)
    assert parse_pod_name("coredns-abc") is None


def test_labels_link_back_to_allot():
    labels = job_labels(workload_id=7, queue_path="rd/vision", pod_set_index=0, flavor="a100-80g")
    assert labels == {
        "app.kubernetes.io/managed-by": "allot",
        "allot.io/workload-id": "7",
        "allot.io/queue": "rd.vision",
        "allot.io/pod-set": "0",
        "allot.io/flavor": "a100-80g",
    }


def test_pods_named_by_the_kinds_controllers_are_their_workloads():
    # PyTorchJob, JobSet, RayJob (its RayCluster's random suffix), TrainJob, Deployment, LWS.
    for pod in ("allot-w42-0-worker-0", "allot-w42-0-workers-0-1-x7k2p",
                "allot-w42-0-x7k2p-head-abcde", "allot-w42-0-x7k2p-gpu-group-worker-abcde",
                "allot-w42-0-node-0-0-abcde", "allot-w42-0-5d9f7c8b4-x7k2p", "allot-w42-0-1-3"):
        assert parse_pod_name(pod) == (42, 0), pod
    assert parse_pod_name("allot-w42-0") is None  # the object, not a pod
    assert parse_pod_name("allot-w42-0-") is None


def test_pod_owners_find_adopted_objects_by_the_longest_name_in_their_namespace():
    owners = PodOwners({("rd-vision", "llm"): 7, ("rd-vision", "llm-eval"): 8,
                        ("rd-nlp", "llm"): 9})
    assert owners.workload_of("rd-vision", "llm-worker-0") == 7
    assert owners.workload_of("rd-vision", "llm-eval-worker-0") == 8
    assert owners.workload_of("rd-nlp", "llm-master-0") == 9
    assert owners.workload_of("rd-vision", "llmx-worker-0") is None
    assert owners.workload_of("rd-vision", "llm-") is None
    assert owners.workload_of("other", "llm-worker-0") is None
    assert owners.workload_of("other", "allot-w3-1-abcde") == 3  # Allot's: by name alone


def test_each_group_of_an_adopted_lws_owns_its_leader_and_workers():
    """Groups of an adopted LeaderWorkerSet are owned as `<name>-<group>`: the leader pod is
    that very name, its workers `<name>-<group>-<worker>`; group 1 is not group 10."""
    owners = PodOwners({("rd-vision", "vllm-1"): 21, ("rd-vision", "vllm-10"): 30})
    assert owners.workload_of("rd-vision", "vllm-1") == 21
    assert owners.workload_of("rd-vision", "vllm-1-3") == 21
    assert owners.workload_of("rd-vision", "vllm-10") == 30
    assert owners.workload_of("rd-vision", "vllm-10-1") == 30
    assert owners.workload_of("rd-vision", "vllm-2") is None


@pytest.mark.parametrize(("labels", "group"), [
    ({"allot.io/object": "vllm", "allot.io/gang": "2", "allot.io/gang-of": "vllm"}, 2),
    ({"allot.io/gang": "2", "allot.io/gang-of": "vllm"}, None),  # submitted through Allot
    ({"allot.io/object": "resnet-ddp"}, None),  # adopted, one gang
    (None, None),
])
def test_a_group_of_an_adopted_object_is_read_from_its_labels(labels, group):
    assert adopted_group(labels) == group


def _pod(annotations=None, labels=None):
    return {"metadata": {"annotations": {"allot.io/gpu-cards": "GPU-a,GPU-b,GPU-c,GPU-d",
                                         **(annotations or {})}, "labels": labels or {}}}


@pytest.mark.parametrize(("annotations", "labels", "card"), [
    ({"batch.kubernetes.io/job-completion-index": "2"}, {}, "GPU-c"),
    # A JobSet's second Job (index 1) of 2 pods each: its pod 1 is the set's pod 3.
    ({"batch.kubernetes.io/job-completion-index": "1", "allot.io/gpu-cards-stride": "2"},
     {"jobset.sigs.k8s.io/job-index": "1"}, "GPU-d"),
    # ... and without the stride its place is unknown: no pin rather than a wrong one.
    ({"batch.kubernetes.io/job-completion-index": "1"}, {"jobset.sigs.k8s.io/job-index": "1"},
     None),
    ({}, {"training.kubeflow.org/replica-index": "1"}, "GPU-b"),
    ({}, {"apps.kubernetes.io/pod-index": "0"}, "GPU-a"),
    ({}, {}, None),  # no index (a Deployment's pod): keeps the template's list
    ({"batch.kubernetes.io/job-completion-index": "4"}, {}, None),  # beyond the list
])
def test_a_pods_card_pin_is_the_card_at_its_index(annotations, labels, card):
    from scheduling.backends.naming import pod_card_pin

    assert pod_card_pin(_pod(annotations, labels)) == card
    assert pod_card_pin({"metadata": {"labels": labels}}) is None  # not a pinned template


def test_the_webhook_pins_a_pod_and_leaves_others_alone():
    import base64
    import json

    from scheduling.admission import admission_review

    def review(pod):
        return admission_review(cluster=None, review={  # type: ignore[arg-type]
            "kind": "AdmissionReview", "request": {
                "uid": "u1", "operation": "CREATE", "kind": {"kind": "Pod"},
                "object": {"kind": "Pod", **pod}}})["response"]

    answer = review(_pod({}, {"training.kubeflow.org/replica-index": "2"}))
    assert answer["allowed"] is True
    assert json.loads(base64.b64decode(answer["patch"])) == [{
        "op": "add", "path": "/metadata/annotations/nvidia.com~1use-gpuuuid", "value": "GPU-c"}]
    assert "patch" not in review({"metadata": {"labels": {"allot.io/queue": "rd.vision"}}})


def test_a_jobset_template_pinned_per_pod_says_how_many_pods_one_of_its_jobs_runs():
    from scheduling.kinds import KINDS
    from scheduling.kinds.base import Placement
    from tests.manifests import manifest

    jobset = KINDS["jobset.x-k8s.io/v1alpha2/JobSet"]
    plain = Placement(labels={}, annotations={}, node_selector={}, nodes=(), gpus=False)
    pinned = Placement(labels={}, annotations={"allot.io/gpu-cards": "a,a,b,b"},
                       node_selector={}, nodes=(), gpus=True)
    obj = jobset.prepare(manifest("JobSet"), name="x", namespace="ns", labels={},
                         annotations={}, placements=[plain, pinned])
    driver, workers = (rj["template"]["spec"]["template"]["metadata"]["annotations"]
                       for rj in obj["spec"]["replicatedJobs"])
    assert workers["allot.io/gpu-cards-stride"] == "2"
    assert "allot.io/gpu-cards-stride" not in driver
