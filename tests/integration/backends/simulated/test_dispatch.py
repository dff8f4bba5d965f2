"""scheduling.backends.simulated.dispatch: Jobs created, started, suspended, deleted, failed;
pods pend, run and succeed on the sped-up clock."""

import time
from io import StringIO

import pytest
from django.core.management import call_command

from scheduling.backends import DispatchRefused, RefusalReason, RunPhase
from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.backends.simulated.models import SimControl, SimJob
from tests.integration.backends.simulated.helpers import make_spec, set_connection

pytestmark = pytest.mark.django_db


def test_pods_pend_run_and_succeed_on_the_sped_up_clock(cluster, backend, clock):
    set_connection(cluster, start_delay_s=20)  # simulated seconds; speedup 10 -> 2 s wall
    ref = backend.create_workload(make_spec(duration_s=600))
    job = SimJob.objects.get(name="allot-w7-0")
    assert (job.pods, job.gpus_per_pod, job.nodes) == (2, 4, ["sim-bj-a100-80g-0"] * 2)
    assert job.suspended and job.speedup == 10 and job.duration_s == 600
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED

    backend.start_workload(ref)
    assert backend.workload_status(ref).pod_sets[0].pending == 2
    clock.advance(1.9)
    assert backend.workload_status(ref).phase is RunPhase.PENDING
    clock.advance(0.2)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.RUNNING and status.pod_sets[0].running == 2
    clock.advance(59.8)  # 2 + 59.8 s wall = 20 + 598 simulated
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(0.3)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.SUCCEEDED
    assert status.totals() == {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}


def test_real_time_run_with_speedup(cluster):
    set_connection(cluster, speedup=200)
    backend = SimulatedBackend(name=cluster.name)  # the real clock
    ref = backend.create_workload(make_spec(duration_s=60))  # 0.3 s of wall time
    started = time.monotonic()
    backend.start_workload(ref)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    while backend.workload_status(ref).phase is not RunPhase.SUCCEEDED:
        assert time.monotonic() - started < 5, "the simulated run never finished"
        time.sleep(0.02)
    assert 0.25 <= time.monotonic() - started < 2


def test_no_duration_runs_until_deleted(backend, clock):
    ref = backend.create_workload(make_spec(duration_s=None))
    backend.start_workload(ref)
    clock.advance(10**7)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    backend.delete_workload(ref)
    assert backend.workload_status(ref).phase is RunPhase.MISSING
    backend.delete_workload(ref)  # idempotent


def test_suspend_then_resume_restarts_the_pods(backend, clock):
    ref = backend.create_workload(make_spec(duration_s=600))
    backend.start_workload(ref)
    clock.advance(50)  # 500 simulated seconds run
    backend.suspend_workload(ref, grace_s=30)
    assert backend.workload_status(ref).phase is RunPhase.SUSPENDED
    backend.suspend_workload(ref, grace_s=30)  # idempotent
    clock.advance(100)
    backend.start_workload(ref)
    clock.advance(50)  # a resumed Job's pods start over: 500 of 600 again
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(10)
    assert backend.workload_status(ref).phase is RunPhase.SUCCEEDED


def test_create_is_idempotent_and_foreign_jobs_conflict(backend):
    ref = backend.create_workload(make_spec())
    assert backend.create_workload(make_spec()) == ref
    assert SimJob.objects.count() == 1
    SimJob.objects.update(workload_id=99)
    with pytest.raises(DispatchRefused) as refused:
        backend.create_workload(make_spec())
    assert refused.value.reason is RefusalReason.CONFLICT
    assert "belong to workload(s) [99], not 7" in refused.value.message


def test_start_of_a_deleted_workload_is_job_gone(backend):
    ref = backend.create_workload(make_spec())
    backend.delete_workload(ref)
    with pytest.raises(DispatchRefused) as refused:
        backend.start_workload(ref)
    assert refused.value.reason is RefusalReason.JOB_GONE


def test_jobs_named_in_the_connection_fail_after_the_given_run_time(cluster, backend, clock):
    set_connection(cluster, fail=["allot-w7-0"], fail_after_s=100)
    ref = backend.create_workload(make_spec(duration_s=600))
    other = backend.create_workload(make_spec(workload_id=8, duration_s=600))
    backend.start_workload(ref)
    backend.start_workload(other)
    clock.advance(9.9)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(0.2)
    status = backend.workload_status(ref)
    assert status.phase is RunPhase.FAILED
    assert status.pod_sets[0].failed == 1
    assert "failed after 100 s; simulated failure" in status.message
    assert backend.workload_status(other).phase is RunPhase.RUNNING


def test_fail_next_fails_half_way_by_default(cluster, backend, clock):
    call_command("sim_cluster", "sim-bj", "--fail-next", stdout=StringIO())
    ref = backend.create_workload(make_spec(duration_s=600))
    healthy = backend.create_workload(make_spec(workload_id=8, duration_s=600))
    backend.start_workload(ref)
    backend.start_workload(healthy)
    clock.advance(29.9)
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    clock.advance(0.2)
    assert backend.workload_status(ref).phase is RunPhase.FAILED
    assert backend.workload_status(healthy).phase is RunPhase.RUNNING
    assert SimControl.objects.get(cluster=cluster).fail_next == 0
