"""scheduling.backends.base: the protocol's pure parts (refs, the phase of a gang, errors)."""

import pytest

from scheduling.backends import (
    BackendError,
    DispatchRefused,
    PodSetStatus,
    RefusalReason,
    RunPhase,
    WorkloadRef,
    WorkloadStatus,
)


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
