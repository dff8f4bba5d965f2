"""The protocol's pure parts: naming, refs, the phase of a gang, the backend choice."""

from types import SimpleNamespace

import pytest

from scheduling.backends import (
    BackendError,
    DispatchRefused,
    PodSetStatus,
    RefusalReason,
    RunPhase,
    WorkloadRef,
    WorkloadStatus,
    get_backend,
)
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


def test_ref_for_workload_names_each_pod_set():
    ref = WorkloadRef.for_workload(namespace="rd-vision", workload_id=5, pod_set_indexes=[0, 1])
    assert ref.job_names == ("allot-w5-0", "allot-w5-1")


def _status(*sets):
    ref = WorkloadRef.for_workload(namespace="n", workload_id=1, pod_set_indexes=range(len(sets)))
    return WorkloadStatus(ref=ref, pod_sets=tuple(sets))


@pytest.mark.parametrize(
    ("sets", "phase"),
    [
        ((), RunPhase.MISSING),
        ((PodSetStatus("a", exists=False),), RunPhase.MISSING),
        ((PodSetStatus("a", True, count=2, suspended=True),), RunPhase.SUSPENDED),
        ((PodSetStatus("a", True, count=2, pending=1, running=1),), RunPhase.PENDING),
        (
            (
                PodSetStatus("a", True, count=2, running=2),
                PodSetStatus("b", True, count=1, pending=1),
            ),
            RunPhase.PENDING,
        ),
        ((PodSetStatus("a", True, count=2, running=1, succeeded=1),), RunPhase.RUNNING),
        ((PodSetStatus("a", True, count=2, succeeded=2),), RunPhase.SUCCEEDED),
        ((PodSetStatus("a", True, count=2, running=1, failed=1, job_failed=True),),
         RunPhase.FAILED),
    ],
)
def test_phase_of_a_gang(sets, phase):
    assert _status(*sets).phase is phase


def test_status_totals_and_message():
    status = _status(
        PodSetStatus("a", True, count=2, running=2),
        PodSetStatus("b", True, count=3, pending=1, failed=2, job_failed=True, message="OOM"),
    )
    assert status.totals() == {"pending": 1, "running": 2, "succeeded": 0, "failed": 2}
    assert status.message == "OOM"


def test_errors_carry_reason_status_and_message():
    refused = DispatchRefused("namespace_forbidden", "namespaces \"x\" is forbidden")
    assert refused.reason is RefusalReason.NAMESPACE_FORBIDDEN
    assert "forbidden" in str(refused)
    error = BackendError("etcd timeout", status=500)
    assert error.retryable and str(error) == "HTTP 500: etcd timeout"


def test_unknown_backend_is_a_clear_error():
    cluster = SimpleNamespace(name="x", backend="slurm", connection={})
    with pytest.raises(BackendError, match="unknown backend 'slurm'"):
        get_backend(cluster)
