"""Delivery of the outbox (scheduling/fleet/delivery.py): a failing cluster call is retried
with a capped exponential backoff until the cluster confirms it, loudly past a threshold;
several workers never take the same row; delivered rows are forgotten after a while."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from scheduling.backends.base import BackendError
from scheduling.fleet import dispatch
from scheduling.fleet.delivery import backoff_s, outbox_deliver, outbox_prune
from scheduling.models import (
    EventCode,
    EventType,
    OutboxKind,
    OutboxMessage,
    Workload,
)
from scheduling.services import workload_cancel
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.fakes import FakeBackend
from tests.integration.scheduling.world import make_world, submit


@dataclass
class Flaky(FakeBackend):
    """A fake cluster whose next `failures` deletes fail as an unreachable API server does."""

    failures: int = 0

    def delete_workload(self, ref):
        if self.failures:
            self.failures -= 1
            raise BackendError("connection refused", status=503)
        super().delete_workload(ref)


@pytest.fixture
def outbox_conf(settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "outbox_backoff_base_s": 2.0,
                              "outbox_backoff_max_s": 10.0, "outbox_alarm_attempts": 3}
    return settings.ALLOT_WORKERS


def _cancelled_running(world, backends, name: str, *, failures: int = 0):
    """A workload dispatched to a fake cluster, then cancelled: its delete is in the outbox."""
    w = submit(world, name)
    cycle_run(wait=True)
    adm = w.admissions.get()
    backends[adm.cluster.name] = Flaky(adm.cluster.name, failures=failures)
    assert dispatch.cluster_dispatch(cluster_id=adm.cluster_id).started == [w.pk]
    OutboxMessage.objects.filter(kind=OutboxKind.DISPATCH).update(delivered_at=timezone.now())
    workload_cancel(user=world.alice, workload=w)
    return w, adm, backends[adm.cluster.name]


def test_backoff_doubles_from_the_base_up_to_the_cap(outbox_conf):
    assert [backoff_s(n) for n in (1, 2, 3, 4, 5, 100)] == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_a_failing_delete_is_retried_with_backoff_until_confirmed(
        world_dispatch_after_commit, backends, outbox_conf):
    w, adm, cluster = _cancelled_running(world_dispatch_after_commit, backends, "flaky",
                                         failures=2)
    row = OutboxMessage.objects.get(kind=OutboxKind.DELETE)
    assert row.admission_id == adm.pk and row.attempts == 0
    t0 = timezone.now()

    assert outbox_deliver(now=t0).failed == [row.pk]
    row.refresh_from_db()
    adm.refresh_from_db()
    assert row.attempts == 1 and row.next_attempt_at == t0 + timedelta(seconds=2)
    assert row.delivered_at is None and "HTTP 503: connection refused" in row.last_error
    assert adm.cleaned_at is None and cluster.phase.get(w.pk) is not None

    # Not due before its backoff ends: nothing is sent.
    assert outbox_deliver(now=t0 + timedelta(seconds=1)).failed == []
    assert cluster.failures == 1

    t1 = t0 + timedelta(seconds=2)
    assert outbox_deliver(now=t1).failed == [row.pk]
    row.refresh_from_db()
    assert row.attempts == 2 and row.next_attempt_at == t1 + timedelta(seconds=4)

    t2 = t1 + timedelta(seconds=4)
    assert outbox_deliver(now=t2).delivered == [row.pk]
    row.refresh_from_db()
    adm.refresh_from_db()
    assert row.attempts == 3 and row.delivered_at == t2
    assert adm.cleaned_at == t2 and w.pk not in cluster.phase
    # Delivered rows are done: deleting twice would be harmless, but nothing is sent again.
    assert outbox_deliver(now=t2 + timedelta(hours=1)).delivered == []


def test_an_unconfirmed_release_is_logged_and_on_the_timeline(
        world_dispatch_after_commit, backends, outbox_conf, caplog):
    w, adm, _ = _cancelled_running(world_dispatch_after_commit, backends, "stuck",
                                   failures=100)
    now = timezone.now()
    with caplog.at_level(logging.WARNING, logger="scheduling.fleet.delivery"):
        for _ in range(4):
            outbox_deliver(now=now)
            now = OutboxMessage.objects.get(kind=OutboxKind.DELETE).next_attempt_at
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # attempts 3 and 4, from the threshold (3) on
    assert "not confirmed after 3 attempts" in errors[0].getMessage()
    assert "HTTP 503: connection refused" in errors[0].getMessage()
    event = Workload.objects.get(pk=w.pk).events.get(type=EventType.UNCONFIRMED)
    assert event.code == EventCode.DELETE_UNCONFIRMED
    assert f"has not confirmed the delete of its objects; its 8 GPUs on {adm.nodes[0]}" \
        in event.message
    assert "after 3 attempts (next try in 8s)" in event.message


def test_a_dispatch_row_is_retried_until_the_pass_has_no_errors(
        world_dispatch_after_commit, backends, outbox_conf):
    w = submit(world_dispatch_after_commit, "later")
    cycle_run(wait=True)
    adm = w.admissions.get()
    row = OutboxMessage.objects.get(kind=OutboxKind.DISPATCH)
    assert row.cluster_id == adm.cluster_id

    class Down(FakeBackend):
        def create_workload(self, spec):
            raise BackendError("timed out")

    backends[adm.cluster.name] = Down(adm.cluster.name)
    t0 = timezone.now()
    assert outbox_deliver(now=t0).failed == [row.pk]
    assert "timed out" in OutboxMessage.objects.get(pk=row.pk).last_error
    backends[adm.cluster.name] = FakeBackend(adm.cluster.name)
    assert outbox_deliver(now=t0 + timedelta(seconds=2)).delivered == [row.pk]
    adm.refresh_from_db()
    assert adm.dispatched_at is not None


def test_delivered_rows_are_forgotten_after_the_keep_time(world_dispatch_after_commit,
                                                          backends, settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "outbox_keep_s": 3600}
    _cancelled_running(world_dispatch_after_commit, backends, "old")
    now = timezone.now()
    outbox_deliver(now=now)
    assert outbox_prune(now=now + timedelta(seconds=3500)) == 0
    assert outbox_prune(now=now + timedelta(seconds=3700)) == 2  # the dispatch, the delete
    assert not OutboxMessage.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_row_another_worker_holds_is_skipped_not_waited_for(settings, monkeypatch):
    """Two delivery passes at once take different rows: the second skips the row the first
    has locked, without waiting for it."""
    from scheduling.backends import registry

    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    fakes: dict[str, FakeBackend] = {}
    monkeypatch.setattr(registry, "get_backend",
                        lambda c: fakes.setdefault(c.name, FakeBackend(c.name)))
    monkeypatch.setattr("scheduling.enqueue.outbox_nudge", lambda: None)
    monkeypatch.setattr("scheduling.enqueue.cycle_nudge", lambda: None)
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    submit(world, "one")
    cycle_run(wait=True)
    row = OutboxMessage.objects.get(kind=OutboxKind.DISPATCH)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(OutboxMessage.objects.select_for_update().filter(pk=row.pk))
                locked.set()
                release.wait(20)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(20)
        report = outbox_deliver()  # would block here without SKIP LOCKED
        assert report.delivered == [] and report.failed == []
    finally:
        release.set()
        holder.join(20)
    assert outbox_deliver().delivered == [row.pk]
    row.refresh_from_db()
    assert row.attempts == 1 and row.delivered_at is not None
