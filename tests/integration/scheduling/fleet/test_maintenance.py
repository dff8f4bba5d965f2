"""Maintenance (scheduling/fleet/maintenance.py, workloads_maintain): workloads stuck in any
non-terminal state past its limit are reclaimed and reported."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.fleet import dispatch, maintenance
from scheduling.fleet import sync as fleet_sync
from scheduling.fleet.delivery import outbox_deliver
from scheduling.models import (
    EndReason,
    EventType,
    OutboxKind,
    OutboxMessage,
    Workload,
    WorkloadState,
)
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import make_world, request, submit

S = WorkloadState


@pytest.fixture
def world(db):
    """The tests here put a fake backend (`backends`) on the clusters, which does not join the
    cycle's transaction: the cycle only reserves, as with dispatch in the cycle turned off."""
    return make_world(nodes_per_cluster=2)


@pytest.fixture
def limits(settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "stuck_pending_s": 3600,
                              "stuck_reserved_s": 600, "stuck_running_s": 7200,
                              "stuck_preempting_s": 900}
    return settings.ALLOT_WORKERS


def backdate(w: Workload, seconds: float) -> None:
    Workload.objects.filter(pk=w.pk).update(
        state_changed_at=timezone.now() - timedelta(seconds=seconds))


def test_each_state_has_its_limit_from_the_settings(limits, settings):
    assert maintenance.stuck_limit_s(S.PENDING) == 3600
    assert maintenance.stuck_limit_s(S.RESERVED) == 600
    assert maintenance.stuck_limit_s(S.RUNNING) == 7200
    assert maintenance.stuck_limit_s(S.PREEMPTING) == 900
    assert maintenance.stuck_limit_s(S.FINISHED) == float("inf")
    settings.ALLOT_WORKERS = {**limits, "stuck_pending_s": 0}
    assert maintenance.stuck_limit_s(S.PENDING) == float("inf")  # 0 turns it off
    settings.ALLOT_WORKERS = {k: v for k, v in limits.items() if not k.startswith("stuck_")}
    settings.ALLOT_ENGINE = {**settings.ALLOT_ENGINE, "pods_ready_timeout_s": 100}
    assert maintenance.stuck_limit_s(S.RESERVED) == 260  # unset: twice the timeout + 60 s
    assert maintenance.stuck_limit_s(S.PENDING) == 7 * 86400


def test_stuck_pending_fails_with_the_reason(world, backends, limits):
    w = workload_submit(user=world.alice, data=request("waits"))  # no cycle runs: it waits
    backdate(w, 3500)
    assert maintenance.workloads_maintain().reclaimed == []
    w.refresh_from_db()
    assert w.state == S.PENDING
    backdate(w, 3700)
    report = maintenance.workloads_maintain()
    w.refresh_from_db()
    assert w.pk in report.failed and w.state == S.FAILED and w.finished_at is not None
    event = w.events.get(type=EventType.RECLAIMED)
    assert event.code == "STUCK_PENDING"
    assert "stuck in pending for 3700s, more than the 3600s limit" in event.message
    assert "(ALLOT_STUCK_PENDING_S)" in event.message and event.payload["limit_s"] == 3600
    assert w.reason_code == "STUCK_PENDING"
    assert list(w.events.values_list("type", flat=True))[-2:] == ["reclaimed", "failed"]


def test_stuck_running_fails_reclaims_capacity_and_deletes_its_jobs(world, backends, limits):
    w = workload_submit(user=world.alice, data=request("hung"))
    cycle_run(wait=True)
    adm = w.admissions.get()
    dispatch.cluster_dispatch(cluster_id=adm.cluster_id)
    backends[adm.cluster.name].phase[w.pk] = "running"
    fleet_sync.cluster_sync(cluster_id=adm.cluster_id, nodes=False)
    backdate(w, 7300)
    report = maintenance.workloads_maintain()
    w.refresh_from_db()
    adm.refresh_from_db()
    assert report.failed == [w.pk] and w.state == S.FAILED
    assert adm.end_reason == EndReason.RECLAIMED_STUCK and adm.ended_at is not None
    message = w.events.get(type=EventType.RECLAIMED).message
    assert "stuck in running for 7300s (2.0 h), more than the 7200s (2.0 h) limit" in message
    assert "capacity reclaimed, failed" in message
    # Its Jobs are deleted at once (through the outbox), not after the cleanup TTL.
    row = OutboxMessage.objects.get(kind=OutboxKind.DELETE)
    assert row.admission_id == adm.pk and row.delivered_at is None
    assert row.pk in outbox_deliver().delivered
    adm.refresh_from_db()
    assert ("delete", w.pk) in backends[adm.cluster.name].calls and adm.cleaned_at is not None


def test_stuck_preempting_and_reserved_go_back_to_the_queue(world, backends, limits):
    w = workload_submit(user=world.alice, data=request("victim"))
    cycle_run(wait=True)
    Workload.objects.filter(pk=w.pk).update(state=S.PREEMPTING)
    backdate(w, 1000)
    report = maintenance.workloads_maintain()
    w.refresh_from_db()
    assert report.requeued == [w.pk] and w.state == S.PENDING
    assert w.admissions.get().end_reason == EndReason.RECLAIMED_STUCK
    assert w.events.get(type=EventType.RECLAIMED).code == "STUCK_PREEMPTING"
    assert list(w.events.values_list("type", flat=True))[-1] == "requeued"


def test_nothing_is_reclaimed_below_the_limits(world, backends, limits):
    w = workload_submit(user=world.alice, data=request("fine"))
    cycle_run(wait=True)
    backdate(w, 500)
    assert maintenance.workloads_maintain().reclaimed == []
    assert Workload.objects.get(pk=w.pk).state == S.RESERVED


def test_stuck_reserved_workload_is_reclaimed(world, backends):
    w = submit(world, "stuck")
    t0 = timezone.now() - timedelta(hours=1)
    # Submitted before the cycle that admits it, an hour ago.
    Workload.objects.filter(pk=w.pk).update(submitted_at=t0 - timedelta(seconds=1))
    cycle_run(wait=True, now=t0)
    report = maintenance.workloads_maintain(now=timezone.now())
    w.refresh_from_db()
    assert report.reclaimed == [w.pk] and w.state == S.PENDING
    assert w.admissions.get().end_reason == EndReason.RECLAIMED_STUCK
    assert "stuck in reserved" in w.events.get(type=EventType.RECLAIMED).message
