"""scheduling.backends.k8s.status: workload statuses from Jobs and pods, and list_workloads."""

from decimal import Decimal

from scheduling.backends import PodSetSpec, RunPhase, WorkloadRef
from tests.integration.backends.k8s.specs import A100, NS, make_spec


def test_failed_pod_fails_the_gang_with_the_job_message(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    kube.state.set_pod_phases(NS, "allot-w7-0", "Failed", 1)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.FAILED
    assert status.pod_sets[0].failed == 1
    assert status.message == (
        "BackoffLimitExceeded: Job has reached the specified backoff limit"
    )


def test_list_workloads_groups_jobs_by_workload(kube, backend):
    two_sets = (
        PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1), node_selector=dict(A100.node_selector)),
        PodSetSpec(index=1, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1), node_selector=dict(A100.node_selector)),
    )
    backend.create_workload(make_spec(workload_id=3, pod_sets=two_sets))
    backend.create_workload(make_spec(workload_id=12, namespace="rd-nlp"))
    refs = backend.list_workloads()
    assert refs == [
        WorkloadRef(namespace="rd-nlp", workload_id=12, job_names=("allot-w12-0",)),
        WorkloadRef(namespace=NS, workload_id=3, job_names=("allot-w3-0", "allot-w3-1")),
    ]


def test_statuses_of_many_workloads_take_two_calls_per_namespace(kube, backend):
    running = backend.create_workload(make_spec(workload_id=3))
    backend.start_workload(running)
    kube.state.set_pod_phases(NS, "allot-w3-0", "Running")
    suspended = backend.create_workload(make_spec(workload_id=4))
    other_ns = backend.create_workload(make_spec(workload_id=5, namespace="rd-nlp"))
    missing = WorkloadRef.for_workload(namespace=NS, workload_id=6, pod_set_indexes=[0])
    before = len(kube.requests())
    statuses = backend.workload_statuses([running, suspended, other_ns, missing])
    assert [s.phase for s in statuses] == [
        RunPhase.RUNNING, RunPhase.SUSPENDED, RunPhase.SUSPENDED, RunPhase.MISSING,
    ]
    assert [s.ref for s in statuses] == [running, suspended, other_ns, missing]
    calls = kube.requests()[before:]
    assert len(calls) == 4
    assert {c["query"]["labelSelector"] for c in calls} == {
        "allot.io/workload-id in (3,4,6)", "allot.io/workload-id in (5)",
    }
