"""scheduling.backends.k8s.dispatch: a workload's Jobs created, started, suspended, deleted."""

from decimal import Decimal

import pytest

from scheduling.backends import DispatchRefused, PodSetSpec, RefusalReason, RunPhase
from tests.integration.backends.k8s.specs import A100, H100, NS, make_spec


def test_create_twice_is_idempotent_409_means_already_there(kube, backend):
    spec = make_spec()
    backend.create_workload(spec)
    backend.create_workload(spec)
    posts = kube.requests("POST", r"/jobs$")
    assert len(posts) == 2
    assert len(kube.state.jobs) == 1
    assert kube.requests("GET", r"/jobs/allot-w7-0$")  # it read the existing Job to adopt it


def test_job_of_another_workload_is_a_conflict(kube, backend):
    backend.create_workload(make_spec(workload_id=7))
    kube.state.jobs[(NS, "allot-w7-0")]["metadata"]["labels"]["allot.io/workload-id"] = "99"
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec(workload_id=7))
    assert refused.value.reason is RefusalReason.CONFLICT
    assert "belongs to workload 99, not 7" in refused.value.message


def test_stale_suspended_job_is_replaced_with_the_new_flavor(kube, backend):
    backend.create_workload(make_spec())
    h100 = PodSetSpec(index=0, count=1, flavor="h100", gpus=8, cpu=Decimal(8),
                      memory_gib=Decimal(64), node_selector=dict(H100.node_selector))
    backend.create_workload(make_spec(pod_sets=(h100,)))
    job = kube.state.jobs[(NS, "allot-w7-0")]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == dict(H100.node_selector)
    assert job["metadata"]["labels"]["allot.io/flavor"] == "h100"
    assert len(kube.requests("DELETE", r"/jobs/allot-w7-0$")) == 1


def test_start_run_finish(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    job = kube.state.jobs[(NS, "allot-w7-0")]
    assert job["spec"]["suspend"] is False
    patch = kube.requests("PATCH", r"/jobs/allot-w7-0$")[-1]
    assert patch["content_type"] == "application/merge-patch+json"
    assert patch["body"] == {"spec": {"suspend": False}}

    status = backend.workload_status(ref)
    assert status.phase is RunPhase.PENDING
    assert status.pod_sets[0].pending == 2 and status.pod_sets[0].count == 2

    kube.state.set_pod_phases(NS, "allot-w7-0", "Running", 1)
    status = backend.workload_status(ref)
    assert (status.pod_sets[0].pending, status.pod_sets[0].running) == (1, 1)
    assert status.phase is RunPhase.PENDING

    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    assert backend.workload_status(ref).phase is RunPhase.RUNNING

    kube.state.set_pod_phases(NS, "allot-w7-0", "Succeeded")
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.SUCCEEDED
    assert status.totals() == {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}


def test_suspend_on_preemption_stops_pods_and_resume_restarts_them(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    kube.state.set_pod_phases(NS, "allot-w7-0", "Running")
    backend.suspend_workload(ref, grace_s=45)
    assert kube.state.jobs[(NS, "allot-w7-0")]["spec"]["suspend"] is True
    assert kube.state.pods == {}
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    backend.suspend_workload(ref, grace_s=45)  # idempotent
    backend.start_workload(ref)
    assert backend.workload_status(ref).pod_sets[0].pending == 2


def test_delete_removes_jobs_and_pods_and_is_idempotent(kube, backend):
    ref = backend.create_workload(make_spec())
    backend.start_workload(ref)
    backend.delete_workload(ref)
    assert kube.state.jobs == {} and kube.state.pods == {}
    delete = kube.requests("DELETE")[-1]
    assert delete["query"]["propagationPolicy"] == "Background"
    backend.delete_workload(ref)  # 404 is fine
    assert backend.workload_status(ref).phase is RunPhase.MISSING
    backend.suspend_workload(ref, grace_s=5)  # a gone Job is as stopped as suspended


def test_refusal_of_a_later_pod_set_removes_the_jobs_already_created(kube, backend):
    ok = PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                    memory_gib=Decimal(1), node_selector=dict(A100.node_selector))
    kube.fail("POST", r"/jobs$", 422, message='Job.batch "allot-w7-1" is invalid: nope',
              after=1)
    with pytest.raises(DispatchRefused, match="is invalid: nope"):
        backend.create_workload(
            make_spec(pod_sets=(ok, PodSetSpec(**{**ok.__dict__, "index": 1})))
        )
    assert kube.state.jobs == {}  # the gang is all or nothing


def test_start_of_a_vanished_job_is_a_refusal(kube, backend):
    ref = backend.create_workload(make_spec())
    del kube.state.jobs[(NS, "allot-w7-0")]
    with pytest.raises(DispatchRefused) as refused:
        backend.start_workload(ref)
    assert refused.value.reason is RefusalReason.JOB_GONE
