"""The scheduling cycle on the database (scheduling/workers/cycle.py): admissions, a crash
mid-cycle, reasons, reclaim and priority preemption with a fake backend, nominations kept from
one cycle to the next, the pods-ready timeout and the cycle lock."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas.models import Flavor, Queue, QuotaEntry
from scheduling.backends.base import BackendError
from scheduling.backends.simulated.models import SimJob
from scheduling.fleet.delivery import outbox_deliver
from scheduling.locks import LOCK_KEY
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
from scheduling.selectors import queue_usage
from scheduling.services import workload_cancel
from scheduling.workers.cycle import cycle_run
from tests.factories import quota_update
from tests.integration.scheduling.fakes import FakeBackend
from tests.integration.scheduling.world import make_world, running_workload, submit

S = WorkloadState


@pytest.fixture
def world(world_dispatch_after_commit):
    """Dispatch after commit (conftest.py): the cycle only reserves."""
    return world_dispatch_after_commit


def test_cycle_admits_and_records_admissions(world):
    a = submit(world, "a", count=2)
    b = submit(world, "b")
    report = cycle_run(wait=True)
    assert report.ran and sorted(report.admitted) == sorted([a.pk, b.pk])
    a.refresh_from_db()
    assert a.state == S.RESERVED
    adm = a.admissions.get()
    assert adm.ended_at is None and adm.gpus == 16 and len(adm.nodes) == 2
    assert adm.borrowed is True  # 16 + 8 > vision's min 8: one of them borrows
    assert a.events.filter(type=EventType.ADMITTED).count() == 1
    usage = queue_usage()
    assert usage["rd/vision"][("a100-80g", "gpu")]["used"] == 24
    assert usage["rd"][("a100-80g", "gpu")]["used"] == 24
    assert usage["rd/vision"][("a100-80g", "gpu")]["borrowed"] == 16
    assert usage["rd/nlp"][("a100-80g", "gpu")]["lent"] == 8


def test_crash_mid_cycle_leaves_the_database_as_it_was(world):
    submit(world, "a")
    submit(world, "b", count=4)  # too big for what is left: gets a reason
    before = (list(Workload.objects.values_list("pk", "state", "reason_code")),
              WorkloadEvent.objects.count(), Admission.objects.count())

    def boom(snapshot, result):
        assert result.admitted  # the engine decided something...
        raise RuntimeError("worker killed mid-cycle")

    with pytest.raises(RuntimeError, match="mid-cycle"):
        cycle_run(wait=True, after_snapshot=boom)
    after = (list(Workload.objects.values_list("pk", "state", "reason_code")),
             WorkloadEvent.objects.count(), Admission.objects.count())
    assert after == before
    assert cycle_run(wait=True).admitted  # ...and the next cycle does it for real


def test_same_reason_in_consecutive_cycles_is_recorded_once(world):
    for i in range(3):
        submit(world, f"fill{i}", queue="rd/vision")  # 24 = vision's max
    late = submit(world, "late")
    cycle_run(wait=True)
    cycle_run(wait=True)
    late.refresh_from_db()
    assert late.state == S.PENDING and late.reason_code == "QUOTA_MAX"
    assert "max 24" in late.reason_message
    assert late.events.filter(type=EventType.REASON).count() == 1


def test_reclaim_then_requeue_after_grace_keeps_progress(db, backends):
    world = make_world(cluster_names=("bj",), nodes_per_cluster=3)  # 24 GPUs
    hogs = [submit(world, f"hog{i}", user=world.carol, queue="rd/nlp",
                   termination_grace_s=5) for i in range(3)]
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    assert all(Workload.objects.get(pk=h.pk).state == S.RESERVED for h in hogs)
    # The hogs run (nlp: 8 within min, 16 borrowed); vision arrives within its guarantee.
    Admission.objects.filter(workload__in=hogs).update(running_at=t0, dispatched_at=t0)
    Workload.objects.filter(pk__in=[h.pk for h in hogs]).update(state=S.RUNNING)
    mine = submit(world, "v1")
    t1 = t0 + timedelta(seconds=100)
    report = cycle_run(wait=True, now=t1)
    mine.refresh_from_db()
    assert mine.state == S.PENDING
    victims = list(Workload.objects.filter(state=S.PREEMPTING))
    assert len(victims) == 1 and victims[0].preempt_kind == "reclaim"
    victim = victims[0]
    assert victim.preempted_by_id == mine.pk
    event = victim.events.get(type=EventType.PREEMPTED)
    assert event.payload["kind"] == "reclaim" and event.payload["by"] == mine.pk
    assert event.code == "QUOTA_BORROW_UNAVAILABLE" and "rd/vision" in event.message
    assert victim.preempt_deadline == t1 + timedelta(seconds=5)
    assert report.suspend_admissions == [victim.admissions.get().pk]
    # In grace: capacity still counts as used, so v1 waits.
    assert cycle_run(wait=True, now=t1 + timedelta(seconds=2)).admitted == []
    # Grace over: the victim is requeued with its 100 s of progress...
    t2 = t1 + timedelta(seconds=6)
    report = cycle_run(wait=True, now=t2)
    victim.refresh_from_db()
    assert report.requeued == [victim.pk]
    assert victim.progress_s == pytest.approx(100.0)
    assert victim.submitted_at < t1 and victim.state == S.PENDING
    assert victim.admissions.get(end_reason=EndReason.PREEMPTED).ended_at == t2
    assert report.delete_admissions == [victim.admissions.get().pk]
    # ...but its node is not free before the cluster confirms the delete of its Jobs.
    assert report.admitted == []
    outbox_deliver(now=t2)
    assert victim.admissions.get().cleaned_at == t2
    # Confirmed: v1 takes its place.
    assert cycle_run(wait=True, now=t2 + timedelta(seconds=1)).admitted == [mine.pk]
    # The victim waits again: its queue is in its reclaim cooldown and the fleet is full
    # (which of the two the engine names first is its choice).
    victim.refresh_from_db()
    assert victim.reason_code in ("COOLDOWN", "NO_CAPACITY")


def test_freed_node_goes_to_its_preemptor_in_a_later_cycle(db, backends):
    """Each cycle is rebuilt from the database: the preemptor's nomination is stored on it.
    rd (min 24, max 32): vision, nlp (max 32), ml, min 8 each; bj 4 x 8. nlp fills bj with big
    (2 x 8) and r1, r2 (8, batch-low). p7 (vision, 7) reclaims r2; serve (ml, 8, higher
    priority) reclaims r1. When r2's grace is over serve still waits for r1 and is ahead in the
    order: without the nomination it took r2's node and p7 reclaimed big too."""
    world = make_world(cluster_names=("bj",), nodes_per_cluster=4)
    rd = world.vision.parent
    quota_update(QuotaEntry.objects.filter(queue=rd), min=24)
    quota_update(QuotaEntry.objects.filter(queue=world.nlp), max=32)
    ml = Queue.objects.create(name="ml", parent=rd, namespace="rd-ml")
    QuotaEntry.objects.create(queue=ml, flavor=Flavor.objects.get(name="a100-80g"),
                              resource="gpu", min=8, max=24)
    root = world.admin
    big = submit(world, "big", user=root, queue="rd/nlp", count=2)
    r1, r2 = (submit(world, name, user=root, queue="rd/nlp", priority_class="batch-low",
                     termination_grace_s=5) for name in ("r1", "r2"))
    t0 = timezone.now()
    assert sorted(cycle_run(wait=True, now=t0).admitted) == sorted([big.pk, r1.pk, r2.pk])
    Admission.objects.update(running_at=t0, dispatched_at=t0)
    Workload.objects.update(state=S.RUNNING)
    p7 = submit(world, "p7", user=root, gpus=7)
    t1 = t0 + timedelta(seconds=100)
    assert cycle_run(wait=True, now=t1).preempted == [r2.pk]
    p7.refresh_from_db()
    r2_node = r2.admissions.get().nodes
    assert p7.nomination["flavor"] == "a100-80g"
    assert [(v["name"], v["queue"], v["cluster"], v["nodes"]) for v in
            p7.nomination["victims"]] == [(str(r2.pk), "rd/nlp", "bj", r2_node)]
    serve = submit(world, "serve", user=root, queue="rd/ml", priority_class="inference-high")
    assert cycle_run(wait=True, now=t1 + timedelta(seconds=2)).preempted == [r1.pk]
    report = cycle_run(wait=True, now=t1 + timedelta(seconds=6))  # r2's grace is over
    assert report.requeued == [r2.pk]
    # Its node stays taken until the cluster confirms r2's Jobs deleted: p7 waits for it as
    # for a victim in grace, keeps its nomination and reclaims nothing else.
    assert report.admitted == [] and report.preempted == []
    p7.refresh_from_db()
    assert p7.nomination is not None and p7.reason_code == "WAITING_FOR_PREEMPTION"
    outbox_deliver(now=t1 + timedelta(seconds=6))
    report = cycle_run(wait=True, now=t1 + timedelta(seconds=7))  # and r1's grace is over
    assert report.admitted == [p7.pk] and report.preempted == []
    assert report.requeued == [r1.pk]
    p7.refresh_from_db()
    assert p7.admissions.get().nodes == r2_node and p7.nomination is None
    serve.refresh_from_db()
    assert serve.state == S.PENDING and serve.reason_code == "WAITING_FOR_PREEMPTION"
    outbox_deliver(now=t1 + timedelta(seconds=8))  # r1's Jobs are gone
    report = cycle_run(wait=True, now=t1 + timedelta(seconds=9))
    assert report.admitted == [serve.pk] and report.preempted == []
    big.refresh_from_db()
    assert big.state == S.RUNNING
    assert not big.events.filter(type=EventType.PREEMPTED).exists()


def test_priority_preemption_in_one_leaf(db, backends):
    world = make_world(cluster_names=("bj",), nodes_per_cluster=3)  # 24 GPUs
    batch = [submit(world, f"batch{i}", priority_class="batch-low", termination_grace_s=0)
             for i in range(3)]
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    Admission.objects.filter(workload__in=batch).update(running_at=t0, dispatched_at=t0)
    Workload.objects.filter(pk__in=[b.pk for b in batch]).update(state=S.RUNNING)
    training = submit(world, "train")
    serve = submit(world, "serve", priority_class="inference-high")
    report = cycle_run(wait=True, now=t0 + timedelta(seconds=10))
    victims = list(Workload.objects.filter(pk__in=report.preempted))
    assert len(victims) == 1 and victims[0].preempt_kind == "priority"
    assert victims[0].preempted_by_id == serve.pk
    training.refresh_from_db()
    assert training.state == S.PENDING  # training does not preempt batch (can_preempt false)


def test_preemption_suspends_go_through_the_outbox(db, backends):
    """The suspend of a victim's Jobs and the event posted beside them are an outbox row of
    the preempting cycle; a failed suspend is retried until the cluster takes it."""
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)  # 8 GPUs
    low = submit(world, "low", priority_class="batch-low", termination_grace_s=30)
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    Admission.objects.filter(workload=low).update(running_at=t0, dispatched_at=t0)
    Workload.objects.filter(pk=low.pk).update(state=S.RUNNING)
    submit(world, "serve", priority_class="inference-high")
    report = cycle_run(wait=True, now=t0 + timedelta(seconds=10))
    assert report.preempted == [low.pk]
    adm = low.admissions.get()
    row = OutboxMessage.objects.get(kind=OutboxKind.SUSPEND)
    assert row.admission_id == adm.pk and row.cluster_id == adm.cluster_id
    assert row.payload["reason"] == low.events.get(type=EventType.PREEMPTED).message

    class Unreachable(FakeBackend):
        def suspend_workload(self, ref, grace_s):
            raise BackendError("connection refused")

    backends["bj"] = Unreachable("bj")
    t1 = t0 + timedelta(seconds=11)
    assert row.pk in outbox_deliver(now=t1).failed
    backends["bj"] = FakeBackend("bj")
    assert row.pk in outbox_deliver(now=t1 + timedelta(seconds=60)).delivered
    assert [c for c in backends["bj"].calls if c[1] == low.pk] == [("suspend", low.pk),
                                                                   ("event", low.pk)]


def test_a_cancelled_workloads_gpus_stay_used_until_its_delete_is_confirmed(db, settings):
    """A cancelled workload's pods run until the cluster confirms their delete: until then no
    cycle places another workload on the GPUs they hold (no 16 GPUs on an 8-GPU node)."""
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": True}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)  # one node of 8 GPUs
    first, _ = running_workload(world, "first", 3600)
    workload_cancel(user=world.alice, workload=first)
    second = submit(world, "second")

    assert cycle_run(wait=True).admitted == []
    second.refresh_from_db()
    assert second.state == S.PENDING and second.reason_code == "NO_CAPACITY"
    assert "most free: bj 0 GPUs" in second.reason_message
    assert "8 GPUs still held by ended workloads" in second.reason_message
    jobs = SimJob.objects.filter(nodes__contains=["bj-a100-0"])
    assert sum(j.pods * j.gpus_per_pod for j in jobs) == 8  # the cancelled one's, still there

    outbox_deliver()  # the cluster confirms the delete
    assert first.admissions.get().cleaned_at is not None
    assert cycle_run(wait=True).admitted == [second.pk]
    assert [j.workload_id for j in SimJob.objects.all()] == [second.pk]


def test_a_cancelled_workloads_fractions_and_slices_stay_held_until_confirmed(db, settings):
    """The same for shapes other than whole cards: two 0.5-GPU pods share the node's one card
    and hold 3 MIG slices each; cancelled, their card and slices stay taken (a whole card and
    2 slices both wait, naming what is held) until the cluster confirms the delete."""
    from scheduling.models import Node

    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": True}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    mig = "nvidia.com/mig-1g.10gb"
    Node.objects.filter(name="bj-a100-0").update(gpus=1, resources={mig: 7000})
    shared = submit(world, "shared", pods=[{"count": 2, "flavors": ["a100-80g"], "gpus": 0.5,
                                            "cpu": 8, "memory_gib": 64,
                                            "resources": {mig: 3}}])
    assert cycle_run(wait=True).admitted == [shared.pk]
    assert shared.admissions.get().cards == [0, 0]
    workload_cancel(user=world.alice, workload=shared)
    whole = submit(world, "whole", gpus=1)
    slices = submit(world, "slices", pods=[{"count": 1, "flavors": ["a100-80g"], "gpus": 0,
                                            "cpu": 1, "memory_gib": 1, "resources": {mig: 2}}])

    assert cycle_run(wait=True).admitted == []
    whole.refresh_from_db()
    slices.refresh_from_db()
    assert whole.reason_code == slices.reason_code == "NO_CAPACITY"
    assert "1 GPUs still held by ended workloads" in whole.reason_message
    assert (f"{mig}: 2 per pod, at most 1 free on a node; 1 GPUs, 6 {mig} still held by "
            "ended workloads") in slices.reason_message

    outbox_deliver()  # the cluster confirms the delete
    assert shared.admissions.get().cleaned_at is not None
    assert sorted(cycle_run(wait=True).admitted) == sorted([whole.pk, slices.pk])


def test_pods_ready_timeout_releases_with_backoff(world, settings):
    settings.ALLOT_ENGINE = {**settings.ALLOT_ENGINE, "pods_ready_timeout_s": 300.0}
    w = submit(world, "slow")
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    report = cycle_run(wait=True, now=t0 + timedelta(seconds=301))
    w.refresh_from_db()
    assert report.released == [w.pk]
    assert w.state == S.PENDING and w.backoff_count == 1
    assert w.not_before == t0 + timedelta(seconds=301 + 60)
    assert w.admissions.get().end_reason == EndReason.PODS_READY_TIMEOUT
    timeout = w.events.get(type=EventType.TIMEOUT)
    assert timeout.code == "PODS_READY_TIMEOUT"
    # not before the backoff ends
    assert w.pk not in cycle_run(wait=True, now=t0 + timedelta(seconds=320)).admitted
    assert w.pk in cycle_run(wait=True, now=t0 + timedelta(seconds=362)).admitted


def test_a_cycle_writes_its_outbox_rows_in_one_insert(world, settings, monkeypatch):
    """Three pods-ready timeouts: three deletes, written with the decisions in one insert, no
    query per row."""
    from core import db
    from scheduling import outbox

    settings.ALLOT_ENGINE = {**settings.ALLOT_ENGINE, "pods_ready_timeout_s": 300.0}
    slow = [submit(world, f"slow{i}") for i in range(3)]
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    inserts: list[tuple[type, int]] = []
    insert_rows = db.insert_rows
    monkeypatch.setattr(outbox.db, "insert_rows", lambda model, objs: (
        inserts.append((model, len(objs))), insert_rows(model, objs)))
    with CaptureQueriesContext(connection) as queries:
        report = cycle_run(wait=True, now=t0 + timedelta(seconds=301))
    assert sorted(report.released) == sorted(w.pk for w in slow)
    assert [i for i in inserts if i[0] is OutboxMessage] == [(OutboxMessage, 3)]
    assert not [q for q in queries.captured_queries if "outboxmessage" in (q["sql"] or "")]
    assert sorted(OutboxMessage.objects.filter(kind=OutboxKind.DELETE).values_list(
        "admission__workload_id", flat=True)) == sorted(w.pk for w in slow)


@pytest.mark.django_db(transaction=True)
def test_cycle_skips_while_another_holds_the_lock():
    make_world(nodes_per_cluster=1)
    held, release = threading.Event(), threading.Event()

    def holder():
        with connections["default"].cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
            held.set()
            release.wait(10)
            cur.execute("COMMIT")
        connections["default"].close()

    if connection.vendor != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    try:
        assert cycle_run().ran is False
    finally:
        release.set()
        t.join()
    assert cycle_run().ran is True


def test_fractions_share_a_card_through_the_cycle_and_count_as_their_fraction(world):
    from decimal import Decimal

    quarters = [submit(world, f"nb-{i}", gpus="0.25") for i in range(4)]
    report = cycle_run(wait=True)
    assert sorted(report.admitted) == sorted(w.pk for w in quarters)
    adms = [w.admissions.get() for w in quarters]
    assert {(tuple(a.nodes), tuple(a.cards)) for a in adms} == {(tuple(adms[0].nodes), (0,))}
    assert [a.gpus for a in adms] == [Decimal("0.250")] * 4
    assert queue_usage()["rd/vision"][("a100-80g", "gpu")]["used"] == 1
    # Rebuilt from the database next cycle, the card stays taken: a fifth quarter opens card 1.
    fifth = submit(world, "nb-4", gpus="0.25")
    cycle_run(wait=True)
    adm = fifth.admissions.get()
    assert (adm.nodes, adm.cards) == (adms[0].nodes, [1])
