"""scheduling/monitoring.py: /metrics' scheduling figures after small scenarios on the
database: pending per queue and reason, admitted, reserved GPUs, quotas, the admission wait,
preemptions and evictions, refusals, the cycle histogram, the guarantee, clusters; and the
running totals' fold (the same totals before and after, each event counted once)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.core import Metric

from quotas.models import Flavor, Queue, QuotaEntry
from scheduling import monitoring, tallies
from scheduling.fleet.delivery import outbox_deliver
from scheduling.models import Admission, Cluster, MetricTally, Node, Workload, WorkloadState
from scheduling.monitoring import event_totals, scheduling_families
from scheduling.pacing import cycle_mark
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import make_world, submit

S = WorkloadState
A100 = ("a100-80g", "gpu")


def samples(families: list[Metric]) -> dict[tuple[str, frozenset], float]:
    """Every sample, by name and labels."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in families for s in family.samples}


def value(found, name, **labels) -> float | None:
    return found.get((name, frozenset(labels.items())))


@pytest.fixture
def world(world_dispatch_after_commit):
    """Dispatch after commit: the cycle only reserves (bj and sh, 16 GPUs each)."""
    return world_dispatch_after_commit


def test_pending_admitted_reserved_and_quotas_after_a_cycle(world):
    a = submit(world, "a", count=2)  # 16 GPUs
    submit(world, "b")  # 8
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    submit(world, "c")  # vision would use 32 > its max 24: QUOTA_MAX
    cycle_run(wait=True, now=t0 + timedelta(seconds=5))
    submit(world, "d", user=world.carol, queue="rd/nlp")  # no cycle yet
    found = samples(scheduling_families(timezone.now()))

    assert value(found, "allot_pending_workloads", queue="rd/vision", reason="QUOTA_MAX") == 1
    assert value(found, "allot_pending_workloads", queue="rd/nlp", reason="QUEUED") == 1
    assert value(found, "allot_pending_oldest_seconds", queue="rd/nlp", reason="QUEUED") < 60
    assert value(found, "allot_admitted_active_workloads", queue="rd/vision") == 2
    assert value(found, "allot_admitted_active_workloads", queue="rd/nlp") is None
    assert value(found, "allot_workloads", queue="rd/vision", state="reserved") == 2
    assert value(found, "allot_workloads", queue="rd/vision", state="pending") == 1
    gpu = {"flavor": "a100-80g", "resource": "gpu"}
    assert value(found, "allot_quota_reserved_resource", queue="rd/vision", **gpu) == 24
    assert value(found, "allot_quota_reserved_resource", queue="rd", **gpu) == 24  # the tree
    assert value(found, "allot_quota_reserved_resource", queue="rd/nlp", **gpu) == 0
    assert value(found, "allot_borrowed_resource", queue="rd/vision", **gpu) == 16
    assert value(found, "allot_lent_resource", queue="rd/nlp", **gpu) == 8
    assert value(found, "allot_pending_resource", queue="rd/vision", **gpu) == 8
    assert value(found, "allot_nominal_quota", queue="rd/vision", **gpu) == 8
    assert value(found, "allot_borrowing_limit", queue="rd/vision", **gpu) == 16  # 24 - 8
    assert value(found, "allot_lending_limit", queue="rd/vision", **gpu) == 8
    # Counters: two admissions in vision, both within the first cycle of their submission.
    assert value(found, "allot_admitted_workloads_total", queue="rd/vision") == 2
    waited = (t0 - a.submitted_at).total_seconds()
    assert value(found, "allot_admission_wait_time_seconds_count", queue="rd/vision") == 2
    assert value(found, "allot_admission_wait_time_seconds_sum",
                 queue="rd/vision") == pytest.approx(waited + (t0 - Workload.objects.get(
                     name="b").submitted_at).total_seconds())
    assert value(found, "allot_admission_wait_time_seconds_bucket", queue="rd/vision",
                 le="1.0") == 2
    assert value(found, "allot_admission_wait_time_seconds_bucket", queue="rd/vision",
                 le="+Inf") == 2
    assert value(found, "allot_cluster_gpus", cluster="bj", flavor="a100-80g") == 16
    assert sum(value(found, "allot_cluster_gpus_reserved", cluster=c, flavor="a100-80g") or 0
               for c in ("bj", "sh")) == 24
    assert value(found, "allot_cluster_health", cluster="bj") == 1.0
    assert value(found, "allot_cluster_min_health") == 0.5
    assert value(found, "allot_cluster_nodes", cluster="sh", flavor="a100-80g",
                 ready="true") == 2


def test_a_borrowing_limit_is_inherited_and_unlimited_is_left_out(world):
    leaf = Queue.objects.create(name="free", parent=Queue.objects.get(path="rd"))
    QuotaEntry.objects.create(queue=leaf, flavor=Flavor.objects.get(), resource="gpu",
                              min=Decimal(0))  # max unset: rd's 32
    top = Queue.objects.create(name="top")
    QuotaEntry.objects.create(queue=top, flavor=Flavor.objects.get(), resource="gpu",
                              min=Decimal(4))  # no max anywhere: unlimited
    found = samples(scheduling_families(timezone.now()))
    gpu = {"flavor": "a100-80g", "resource": "gpu"}
    assert value(found, "allot_borrowing_limit", queue="rd/free", **gpu) == 32
    assert value(found, "allot_borrowing_limit", queue="top", **gpu) is None
    assert value(found, "allot_nominal_quota", queue="top", **gpu) == 4
    assert value(found, "allot_quota_reserved_resource", queue="top", **gpu) == 0


def test_reclaim_counts_a_preemption_an_eviction_and_the_wait_since_the_requeue(db, backends):
    world = make_world(cluster_names=("bj",), nodes_per_cluster=3)  # 24 GPUs
    hogs = [submit(world, f"hog{i}", user=world.carol, queue="rd/nlp", termination_grace_s=5)
            for i in range(3)]
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    Admission.objects.filter(workload__in=hogs).update(running_at=t0, dispatched_at=t0)
    Workload.objects.filter(pk__in=[h.pk for h in hogs]).update(state=S.RUNNING)
    mine = submit(world, "v1")
    t1 = t0 + timedelta(seconds=100)
    cycle_run(wait=True, now=t1)
    victim = Workload.objects.get(state=S.PREEMPTING)
    t2 = t1 + timedelta(seconds=6)
    cycle_run(wait=True, now=t2)  # the victim is requeued at t2
    outbox_deliver(now=t2)
    assert cycle_run(wait=True, now=t2 + timedelta(seconds=1)).admitted == [mine.pk]
    # The victim comes back once v1 is gone: its wait runs from its requeue, not submission.
    Workload.objects.filter(pk=mine.pk).update(state=S.FINISHED)
    Admission.objects.filter(workload=mine).update(ended_at=t2 + timedelta(seconds=50),
                                                   end_reason="finished")
    t3 = t2 + timedelta(seconds=200)  # after nlp's reclaim cooldown (120 s)
    assert cycle_run(wait=True, now=t3).admitted == [victim.pk]

    found = samples(scheduling_families(t3 + timedelta(seconds=1)))
    # The preemption is counted for the queue that reclaimed, the eviction for the victim's.
    assert value(found, "allot_preempted_workloads_total", queue="rd/vision",
                 reason="reclaim") == 1
    assert value(found, "allot_evicted_workloads_total", queue="rd/nlp",
                 reason="Preempted") == 1
    assert value(found, "allot_admitted_workloads_total", queue="rd/nlp") == 4
    # nlp's four waits: three at once (t0), the victim's 200 s from its requeue (160-320 s),
    # not the 300 s from its submission.
    assert value(found, "allot_admission_wait_time_seconds_bucket", queue="rd/nlp",
                 le="160.0") == 3
    assert value(found, "allot_admission_wait_time_seconds_bucket", queue="rd/nlp",
                 le="320.0") == 4


def test_pods_ready_timeouts_and_refusals_are_evictions(world, settings):
    settings.ALLOT_ENGINE = {**settings.ALLOT_ENGINE, "pods_ready_timeout_s": 300.0}
    submit(world, "slow")
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    cycle_run(wait=True, now=t0 + timedelta(seconds=301))
    refused = submit(world, "refused", user=world.carol, queue="rd/nlp")
    from scheduling.models import EventCode, EventType, WorkloadEvent

    WorkloadEvent.objects.create(workload=refused, at=t0, type=EventType.REFUSED,
                                 code=EventCode.DISPATCH_REFUSED, message="refused",
                                 payload={"cluster": "bj", "reason": "node_gone"})
    found = samples(scheduling_families(t0 + timedelta(seconds=302)))
    assert value(found, "allot_evicted_workloads_total", queue="rd/vision",
                 reason="PodsReadyTimeout") == 1
    assert value(found, "allot_evicted_workloads_total", queue="rd/nlp",
                 reason="DispatchRefused") == 1
    assert value(found, "allot_dispatch_refusals_total", cluster="bj", reason="node_gone") == 1


def test_the_fold_keeps_every_total_and_counts_each_event_once(world):
    for name in ("a", "b"):
        submit(world, name)
    t0 = timezone.now()
    cycle_run(wait=True, now=t0)
    before = event_totals(t0)
    assert before[(monitoring.ADMITTED, world.vision.pk, "")] == 2
    assert not MetricTally.objects.exclude(family__in=[monitoring.FOLD, tallies.CYCLE]).exists()

    later = t0 + timedelta(seconds=monitoring.LATE_S + 2 * monitoring.STEP_S)
    assert event_totals(later) == before  # folded now: the rows hold the two admissions
    rows = {(r.family, r.queue_id, r.label): r.value for r in MetricTally.objects.all()}
    assert rows[(monitoring.ADMITTED, world.vision.pk, "")] == 2
    mark = rows[(monitoring.FOLD, 0, "")]
    assert mark <= later.timestamp() - monitoring.LATE_S and mark % monitoring.STEP_S == 0
    assert event_totals(later) == before  # no second fold of the same minute
    # A process that lost the race to move the mark adds nothing.
    assert monitoring._fold(int(mark) - monitoring.STEP_S, int(mark)) is False
    assert event_totals(later) == before
    # New events after the mark are counted from the index, then folded once.
    submit(world, "c", user=world.carol, queue="rd/nlp")
    cycle_run(wait=True, now=later)
    totals = event_totals(later + timedelta(seconds=1))
    assert totals[(monitoring.ADMITTED, world.nlp.pk, "")] == 1
    assert event_totals(later + timedelta(seconds=monitoring.LATE_S + 120)) == totals


def test_a_scrape_costs_the_same_queries_however_many_queues_and_workloads(world):
    def scrape() -> int:
        with CaptureQueriesContext(connection) as queries:
            scheduling_families(timezone.now())
        return len(queries)

    submit(world, "a")
    cycle_run(wait=True)
    event_totals(timezone.now())  # the first fold (of nothing) creates the mark
    few = scrape()
    assert few <= 15
    rd = Queue.objects.get(path="rd")
    for i in range(5):
        leaf = Queue.objects.create(name=f"extra{i}", parent=rd)
        QuotaEntry.objects.create(queue=leaf, flavor=Flavor.objects.get(), resource="gpu",
                                  min=Decimal(0), max=Decimal(8))
    for i in range(6):
        submit(world, f"more{i}", user=world.carol, queue="rd/nlp")
    cycle_run(wait=True)
    assert scrape() == few


def test_each_cycle_is_counted_in_the_duration_histogram(world):
    for _ in range(2):
        cycle_run(wait=True)
    cycle_run(wait=False, after_snapshot=lambda *a: None)
    found = samples(scheduling_families(timezone.now()))
    assert value(found, "allot_cycle_duration_seconds_count") == 3
    assert value(found, "allot_cycle_duration_seconds_sum") > 0
    # A cycle that crashes writes nothing, its duration neither.
    with pytest.raises(RuntimeError):
        cycle_run(wait=True, after_snapshot=lambda *a: (_ for _ in ()).throw(RuntimeError()))
    found = samples(scheduling_families(timezone.now()))
    assert value(found, "allot_cycle_duration_seconds_count") == 3


def test_the_duration_histogram_cumulates_its_buckets(world):
    for seconds in (0.003, 0.2, 0.2, 45.0):
        tallies.cycle_observe(seconds)
    cycle_mark(ended_at=timezone.now(), seconds=45.0)
    found = samples(scheduling_families(timezone.now()))
    assert value(found, "allot_cycle_duration_seconds_count") == 4
    assert value(found, "allot_cycle_duration_seconds_sum") == pytest.approx(45.403)
    assert value(found, "allot_cycle_duration_seconds_bucket", le="0.005") == 1
    assert value(found, "allot_cycle_duration_seconds_bucket", le="0.1") == 1
    assert value(found, "allot_cycle_duration_seconds_bucket", le="0.25") == 3
    assert value(found, "allot_cycle_duration_seconds_bucket", le="30.0") == 3
    assert value(found, "allot_cycle_duration_seconds_bucket", le="+Inf") == 4
    assert value(found, "allot_last_cycle_duration_seconds") == 45.0
    rows = MetricTally.objects.filter(family=tallies.CYCLE)
    assert rows.count() == 4  # three buckets and the sum: not a row per bucket bound


def test_the_leaves_whose_guarantee_a_cycle_left_blocked_are_reported(world, monkeypatch):
    """The engine names them (`violating_leaves`, the replay's min-guarantee metric, tested
    with the engine; it takes a case the engine's rules avoid, so it is stubbed here): the
    cycle carries them to its mark, /metrics reports them until a cycle clears them."""
    from scheduling.engine.engine import Engine

    monkeypatch.setattr(Engine, "violating_leaves", lambda self: {"rd/vision"})
    report = cycle_run(wait=True)
    assert report.guarantee_blocked == ["rd/vision"]
    cycle_mark(ended_at=timezone.now(), seconds=report.seconds,
               guarantee_blocked=report.guarantee_blocked)
    found = samples(scheduling_families(timezone.now()))
    assert value(found, "allot_guarantee_unmet", queue="rd/vision") == 1
    assert value(found, "allot_guarantee_unmet_queues") == 1
    assert value(found, "allot_guarantee_unmet", queue="rd/nlp") is None
    monkeypatch.setattr(Engine, "violating_leaves", lambda self: set())
    report = cycle_run(wait=True)
    cycle_mark(ended_at=timezone.now(), seconds=report.seconds,
               guarantee_blocked=report.guarantee_blocked)
    found = samples(scheduling_families(timezone.now()))
    assert value(found, "allot_guarantee_unmet", queue="rd/vision") is None
    assert value(found, "allot_guarantee_unmet_queues") == 0


def test_undelivered_cluster_calls_and_unhealthy_clusters(world, settings):
    from scheduling import outbox

    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "outbox_alarm_attempts": 3}
    now = timezone.now()
    rows = [outbox.message_dispatch(cluster_id=world.bj.pk, at=now - timedelta(seconds=90)),
            outbox.message_dispatch(cluster_id=world.bj.pk, at=now)]
    rows[0].attempts = 4
    outbox.messages_write(rows)
    Cluster.objects.filter(pk=world.sh.pk).update(
        health=0.9, health_penalty=0.6, health_penalty_until=now + timedelta(minutes=5))
    Node.objects.filter(cluster=world.sh).update(ready=False)
    found = samples(scheduling_families(now))
    assert value(found, "allot_outbox_undelivered_messages", cluster="bj", kind="dispatch") == 2
    assert value(found, "allot_outbox_failing_messages", cluster="bj", kind="dispatch") == 1
    assert value(found, "allot_outbox_oldest_undelivered_seconds", cluster="bj",
                 kind="dispatch") == pytest.approx(90, abs=1)
    assert value(found, "allot_cluster_health", cluster="sh") == pytest.approx(0.3)
    assert value(found, "allot_cluster_nodes", cluster="sh", flavor="a100-80g",
                 ready="false") == 2
    assert value(found, "allot_cluster_gpus", cluster="sh", flavor="a100-80g") is None
