"""Cancellation (scheduling/request/cancel.py): by the owner, once, with its event; the delete
of its Jobs is an outbox row committed with it, delivered even when the broker is down."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from scheduling.backends.simulated.models import SimJob
from scheduling.fleet.delivery import outbox_deliver
from scheduling.models import (
    Admission,
    EndReason,
    EventType,
    OutboxKind,
    OutboxMessage,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.services import workload_cancel, workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.api.conftest import client_for
from tests.integration.scheduling.races import in_thread
from tests.integration.scheduling.world import make_world, request, running_workload

pytestmark = pytest.mark.django_db


def test_cancel_pending_by_owner_and_refuse_second_cancel(world):
    w = workload_submit(user=world.alice, data=request("c1"))
    w = workload_cancel(user=world.alice, workload=w)
    assert w.state == WorkloadState.CANCELLED
    assert w.events.filter(type=EventType.CANCELLED, actor=world.alice).exists()
    with pytest.raises(ValidationError, match="already cancelled"):
        workload_cancel(user=world.alice, workload=w)


def test_events_are_never_missing_for_state_changes(world):
    w = workload_submit(user=world.alice, data=request("ev"))
    workload_cancel(user=world.alice, workload=w)
    assert list(WorkloadEvent.objects.filter(workload=w).values_list("type", flat=True)) == [
        "submitted", "cancelled"]


def test_cancel_ends_a_preemptors_nomination(world):
    """What its victims free is no longer kept for it (the next cycle reads no nomination)."""
    w = workload_submit(user=world.alice, data=request("pre"))
    Workload.objects.filter(pk=w.pk).update(
        nomination={"flavor": "a100-80g", "at": 0.0, "victims": []})
    workload_cancel(user=world.alice, workload=w)
    w.refresh_from_db()
    assert w.state == WorkloadState.CANCELLED and w.nomination is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_cancel_during_a_cycle_returns_at_once_and_the_cycle_drops_its_admission(settings):
    """The cycle decided to admit the workload; the cancel does not wait for it (no scheduling
    lock), and the cycle, reading the row again before writing, drops that decision."""
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    w = workload_submit(user=world.alice, data=request("raced"), nudge=False)
    decided, resume = threading.Event(), threading.Event()

    def between_engine_and_writes(snapshot, result):
        assert [a.workload for a in result.admitted] == [str(w.pk)]
        decided.set()
        resume.wait(20)

    cycles: list = []
    cycle = in_thread(lambda: cycle_run(wait=True, after_snapshot=between_engine_and_writes),
                       cycles)
    assert decided.wait(20)
    cancels: list = []
    cancel = in_thread(lambda: workload_cancel(user=world.alice, workload=w), cancels)
    cancel.join(10)
    # Answered while the cycle is still held with its decision.
    assert not cancel.is_alive() and cycle.is_alive()
    assert cancels[0].state == WorkloadState.CANCELLED
    resume.set()
    cycle.join(20)
    assert cycles[0].admitted == [] and cycles[0].superseded == [w.pk]
    w.refresh_from_db()
    assert w.state == WorkloadState.CANCELLED
    assert not Admission.objects.filter(workload=w).exists()
    types = list(w.events.order_by("at", "id").values_list("type", flat=True))
    assert types == [EventType.SUBMITTED, EventType.CANCELLED]
    assert not OutboxMessage.objects.filter(kind=OutboxKind.DISPATCH).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_cancel_racing_a_preemption_keeps_the_victim_cancelled(settings):
    """The cycle decided to preempt a running workload; the user cancels it meanwhile: the
    preemption is dropped (no cancelled -> preempting, no requeue), the cancel stands."""
    from tests.integration.scheduling.races import cycle_held

    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    victim = workload_submit(user=world.alice, data=request(
        "victim", priority_class="batch-low", termination_grace_s=5), nudge=False)
    assert cycle_run(wait=True).admitted == [victim.pk]
    Admission.objects.update(running_at=timezone.now(), dispatched_at=timezone.now())
    Workload.objects.filter(pk=victim.pk).update(state=WorkloadState.RUNNING)
    high = workload_submit(user=world.alice, data=request(
        "urgent", priority_class="inference-high"), nudge=False)

    def preempts(snapshot, result):
        assert [p.workload for p in result.preempted] == [str(victim.pk)]

    with cycle_held(preempts) as cycles:
        workload_cancel(user=world.alice, workload=victim)
    assert cycles[0].preempted == [] and cycles[0].superseded == [victim.pk]
    victim.refresh_from_db()
    assert victim.state == WorkloadState.CANCELLED
    assert not victim.events.filter(type=EventType.PREEMPTED).exists()
    high.refresh_from_db()
    assert high.state == WorkloadState.PENDING
    assert victim.admissions.get().end_reason == EndReason.CANCELLED


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_cancel_that_waited_for_a_cycles_writes_is_stamped_after_them(settings):
    """A cancel that reaches the row while the cycle holds it (its writes under way) waits for
    them, reads its clock after, and ends the admission the cycle just made: the interval
    ends after it began (an interval ending before it began would be metered negative)."""
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    w = workload_submit(user=world.alice, data=request("late"), nudge=False)
    import scheduling.workers.cycle as cycle_module

    locked, cancel_waits = threading.Event(), threading.Event()
    real = cycle_module._still_as_read

    def lock_then_wait(result, parts, report):
        kept = real(result, parts, report)  # the row is locked now, until the cycle commits
        locked.set()
        assert cancel_waits.wait(20)
        return kept

    cycle_module._still_as_read = lock_then_wait
    try:
        cycles: list = []
        cycle = in_thread(lambda: cycle_run(wait=True), cycles)
        assert locked.wait(20)
        cancels: list = []
        cancel = in_thread(lambda: workload_cancel(user=world.alice, workload=w), cancels)
        for _ in range(200):  # until the cancel waits for the row
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    break
            cancel.join(0.05)
        assert cancel.is_alive()
        cancel_waits.set()
        cycle.join(20)
        cancel.join(20)
    finally:
        cycle_module._still_as_read = real
    assert cycles[0].admitted == [w.pk]
    assert cancels and cancels[0].state == WorkloadState.CANCELLED
    adm = Admission.objects.get(workload=w)
    assert adm.end_reason == EndReason.CANCELLED
    assert adm.ended_at >= adm.reserved_at, (adm.reserved_at, adm.ended_at)
    events = dict(w.events.values_list("type", "at"))
    assert events[EventType.CANCELLED] >= events[EventType.ADMITTED]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_cancel_with_the_broker_down_commits_answers_200_and_deletes_later(monkeypatch, caplog):
    """The broker refuses every task: the cancel still commits and answers 200 with the delete
    of its Jobs in the outbox; a delivery pass (the beat's, once the broker is back) deletes
    them on the cluster and notes it."""
    from celery.app.task import Task
    from kombu.exceptions import OperationalError

    monkeypatch.setattr(Task, "apply_async", lambda self, *a, **kw: None)
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    w, _ = running_workload(world, "doomed", 3600)
    assert SimJob.objects.filter(workload_id=w.pk).exists()

    def broker_down(self, *args, **kwargs):
        raise OperationalError("[Errno 111] Connection refused")

    monkeypatch.setattr(Task, "apply_async", broker_down)
    resp = client_for(world.alice).post(f"/api/v1/workloads/{w.pk}/cancel")
    assert resp.status_code == 200, resp.content
    assert resp.json()["state"] == "cancelled"
    assert "could not nudge the outbox delivery" in caplog.text
    adm = Admission.objects.get(workload=w)
    row = OutboxMessage.objects.get(admission=adm)
    assert row.kind == OutboxKind.DELETE and row.delivered_at is None
    assert adm.end_reason == EndReason.CANCELLED and adm.cleaned_at is None
    assert SimJob.objects.filter(workload_id=w.pk).exists()  # its pods run on, for now

    assert outbox_deliver().delivered == [row.pk]
    adm.refresh_from_db()
    row.refresh_from_db()
    assert row.delivered_at is not None and adm.cleaned_at is not None
    assert not SimJob.objects.filter(workload_id=w.pk).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_reason_computed_before_a_cancel_is_not_written_on_the_cancelled_workload(settings):
    """A waiting workload whose new reason the cycle computed is locked and read again with
    the rest: cancelled meanwhile, it gets neither the reason nor its event (which would be
    stamped before the cancel yet written after it)."""
    from tests.integration.scheduling.races import cycle_held

    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    first = workload_submit(user=world.alice, data=request("first"), nudge=False)
    assert cycle_run(wait=True).admitted == [first.pk]
    second = workload_submit(user=world.alice, data=request("second"), nudge=False)

    def explains(snapshot, result):
        assert str(second.pk) in result.reasons

    with cycle_held(explains) as cycles:
        workload_cancel(user=world.alice, workload=second)
    assert cycles[0].superseded == [second.pk]
    second.refresh_from_db()
    assert second.state == WorkloadState.CANCELLED
    assert (second.reason_code, second.reason_message) == ("", "")
    assert list(second.events.order_by("at", "id").values_list("type", flat=True)) == [
        EventType.SUBMITTED, EventType.CANCELLED]
