"""scheduling.backends.naming: Job and pod names, and the labels that link back to Allot."""

from scheduling.backends.naming import (
    PodOwners,
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
