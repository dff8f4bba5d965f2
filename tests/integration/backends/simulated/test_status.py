"""scheduling.backends.simulated.status: statuses on the clock, list_workloads, the watch."""

import time
from decimal import Decimal

import pytest

from scheduling.backends import PodSetSpec, RunPhase, WorkloadRef
from scheduling.backends.simulated.backend import SimulatedBackend
from tests.integration.backends.simulated.helpers import NS, make_spec, set_connection

pytestmark = pytest.mark.django_db


def test_list_workloads(backend):
    two = (
        PodSetSpec(index=0, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1)),
        PodSetSpec(index=1, count=1, flavor="a100-80g", gpus=1, cpu=Decimal(1),
                   memory_gib=Decimal(1)),
    )
    backend.create_workload(make_spec(workload_id=3, pod_sets=two))
    backend.create_workload(make_spec(workload_id=12))
    assert backend.list_workloads() == [
        WorkloadRef(namespace=NS, workload_id=3, job_names=("allot-w3-0", "allot-w3-1")),
        WorkloadRef(namespace=NS, workload_id=12, job_names=("allot-w12-0",)),
    ]


def test_statuses_of_many_workloads_in_one_query(backend, clock, django_assert_num_queries):
    first = backend.create_workload(make_spec(workload_id=3))
    backend.start_workload(first)
    second = backend.create_workload(make_spec(workload_id=4))
    missing = WorkloadRef.for_workload(namespace=NS, workload_id=5, pod_set_indexes=[0])
    with django_assert_num_queries(1):
        statuses = backend.workload_statuses([first, second, missing])
    assert [s.phase for s in statuses] == [RunPhase.RUNNING, RunPhase.SUSPENDED, RunPhase.MISSING]


def test_watch_wakes_up_when_pods_change_state_by_the_clock(cluster):
    set_connection(cluster, speedup=100, start_delay_s=30)  # pods run 0.3 s after start
    backend = SimulatedBackend(name=cluster.name)
    ref = backend.create_workload(make_spec(workload_id=3, duration_s=None))
    backend.create_workload(make_spec(workload_id=4, duration_s=None))
    resync = backend.watch_workloads(timeout_s=0)
    assert resync.changed == {3, 4}
    backend.start_workload(ref)
    started = backend.watch_workloads(timeout_s=5, resource_version=resync.resource_version)
    assert started.changed == {3}  # started after the bookmark
    assert backend.workload_status(ref).phase is RunPhase.PENDING
    began = time.monotonic()
    running = backend.watch_workloads(timeout_s=5, resource_version=started.resource_version)
    assert running.changed == {3}
    assert time.monotonic() - began < 1.5
    assert backend.workload_status(ref).phase is RunPhase.RUNNING
    quiet = backend.watch_workloads(timeout_s=0.3, resource_version=running.resource_version)
    assert quiet.changed == frozenset()
    assert backend.watch_workloads(timeout_s=0, resource_version="not-a-time").expired


def test_watch_reads_the_marks_not_every_job(cluster, django_assert_max_num_queries):
    set_connection(cluster, speedup=100)
    backend = SimulatedBackend(name=cluster.name)
    backend.dispatch_many([make_spec(workload_id=i, duration_s=20) for i in range(1, 50)])
    bookmark = backend.watch_workloads(timeout_s=0).resource_version
    began = time.monotonic()
    with django_assert_max_num_queries(40):
        done = backend.watch_workloads(timeout_s=3, resource_version=bookmark)
    assert done.changed == frozenset(range(1, 50))  # all end 0.2 s after their start
    assert time.monotonic() - began < 1.0
    statuses = backend.workload_statuses([make_spec(workload_id=1).ref])
    assert statuses[0].phase is RunPhase.SUCCEEDED


def test_watch_overlap_reports_recent_changes_again(cluster):
    backend = SimulatedBackend(name=cluster.name, watch_overlap_s=5)
    backend.dispatch_many([make_spec(workload_id=8, duration_s=None)])
    bookmark = backend.watch_workloads(timeout_s=0).resource_version
    # Written before the bookmark, but within the overlap: seen again (a late commit is safe).
    assert backend.watch_workloads(timeout_s=0, resource_version=bookmark).changed == {8}
    exact = SimulatedBackend(name=cluster.name)
    assert exact.watch_workloads(timeout_s=0, resource_version=bookmark).changed == frozenset()
