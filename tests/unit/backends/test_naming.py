"""scheduling.backends.naming: Job and pod names, and the labels that link back to Allot."""

from scheduling.backends.naming import (
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
