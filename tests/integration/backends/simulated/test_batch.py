"""scheduling.backends.simulated.batch: dispatch_many, a batch in a few queries."""

from datetime import timedelta

import pytest

from scheduling.backends import RefusalReason, RunPhase, WorkloadSpec
from scheduling.backends.simulated.models import SimControl, SimJob
from scheduling.backends.simulated.services import sim_control_set
from tests.integration.backends.simulated.helpers import T0, make_spec, set_connection

pytestmark = pytest.mark.django_db


def test_dispatch_many_creates_and_starts_a_batch_in_a_few_queries(
        cluster, backend, clock, django_assert_max_num_queries):
    specs = [make_spec(workload_id=i, duration_s=600) for i in range(100, 140)]
    with django_assert_max_num_queries(8):
        outcomes = backend.dispatch_many(specs)
    assert [o.ref for o in outcomes] == [s.ref for s in specs]
    assert all(o.refused is None and o.error is None and o.running for o in outcomes)
    jobs = SimJob.objects.filter(workload_id__in=range(100, 140))
    assert jobs.count() == 40 and not jobs.filter(suspended=True).exists()
    job = jobs.get(workload_id=100)
    assert job.started_at == T0 and job.touched_at == T0 and job.ready_at == T0
    assert job.done_at == T0 + timedelta(seconds=60)  # 600 simulated s at speedup 10
    statuses = backend.workload_statuses([s.ref for s in specs])
    assert {s.phase for s in statuses} == {RunPhase.RUNNING}


def test_dispatch_many_keeps_the_one_by_one_rules(cluster, backend):
    set_connection(cluster, forbidden_namespaces=["ops"])
    backend.create_workload(make_spec(workload_id=9))  # allot-w9-0 exists already ...
    SimJob.objects.filter(workload_id=9).update(workload_id=99)  # ... owned by another one
    sim_control_set(cluster_name=cluster.name, refuse_next=1, fail_next=1)
    gone = make_spec(workload_id=3, nodes=["sim-bj-nope"] * 2)
    forbidden = WorkloadSpec(**{**make_spec(workload_id=4).__dict__, "namespace": "ops"})
    specs = [make_spec(workload_id=1), make_spec(workload_id=2), gone, forbidden,
             make_spec(workload_id=9)]
    out = backend.dispatch_many(specs)
    assert out[0].refused.reason is RefusalReason.REFUSED  # refuse-next takes the first
    assert out[1].refused is None and out[1].running
    assert out[2].refused.reason is RefusalReason.NODE_GONE
    assert out[3].refused.reason is RefusalReason.NAMESPACE_FORBIDDEN
    assert out[4].refused.reason is RefusalReason.CONFLICT
    control = SimControl.objects.get(cluster=cluster)
    assert (control.refuse_next, control.fail_next) == (0, 0)
    assert SimJob.objects.get(workload_id=2).fail_after_s == 300  # fail-next: half the run
    assert not SimJob.objects.filter(workload_id__in=[1, 3, 4]).exists()


def test_dispatch_many_is_idempotent_and_replaces_a_previous_interval(cluster, backend, clock):
    spec = make_spec(workload_id=5, duration_s=600)
    backend.dispatch_many([spec])
    clock.advance(10)
    again = backend.dispatch_many([spec])  # a retried dispatch: nothing new, still running
    assert again[0].refused is None and again[0].running
    assert SimJob.objects.get(workload_id=5).started_at == T0
    backend.suspend_workload(spec.ref, 0)
    assert backend.dispatch_many([spec], replace=frozenset({5}))[0].running
    assert SimJob.objects.get(workload_id=5).started_at == T0 + timedelta(seconds=10)


def test_dispatch_many_with_a_refusing_cluster_refuses_all(cluster, backend):
    set_connection(cluster, refuse=True)
    out = backend.dispatch_many([make_spec(workload_id=1), make_spec(workload_id=2)])
    assert [o.refused.reason for o in out] == [RefusalReason.REFUSED] * 2
    assert not SimJob.objects.exists()
