"""Submission (scheduling/request/submission.py): what a submission records, the submission
checks' verdicts, the one-statement insert (its plan, the queue position it reads, the rows it
writes, as bulk_create writes them) and the hot statements prepared once per connection."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core import db
from scheduling import extensions, selectors, services
from scheduling.models import Admission, Cluster, EventType, Workload, WorkloadState
from scheduling.services import workload_submit
from tests.factories import workloads_set_state
from tests.integration.scheduling.conftest import body
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db


def test_submit_records_pending_with_submitted_event(world):
    w = workload_submit(user=world.alice, data=request("resnet-1"))
    assert w.state == WorkloadState.PENDING
    assert w.team.name == "vision"
    assert w.priority_class.name == "training"
    assert [(ps.count, ps.gpus, ps.flavors) for ps in w.pod_sets.all()] == [
        (1, 8, ["a100-80g"])]
    events = list(w.events.values_list("type", flat=True))
    assert events == [EventType.SUBMITTED]
    assert "8 GPUs in 1 pods" in w.events.get().message


def test_submission_check_denies_and_audits(world):
    def deny_big(ctx):
        gpus = sum(p["count"] * p["gpus"] for p in ctx.request["pods"])
        if gpus > 8:
            return extensions.SubmissionVerdict(
                deny=[("POLICY_DENIED", f"policy max-8: {gpus} GPUs > 8")])
        return extensions.SubmissionVerdict(audit=["policy max-8: allowed"])

    extensions.register_submission_check(deny_big)
    try:
        ok = workload_submit(user=world.alice, data=request("small"))
        denied = workload_submit(user=world.alice, data=request("big", count=2))
    finally:
        extensions.unregister_submission_check(deny_big)
    assert ok.state == WorkloadState.PENDING
    assert ok.events.filter(type=EventType.POLICY, message="policy max-8: allowed").exists()
    assert denied.state == WorkloadState.REJECTED
    assert denied.events.filter(type=EventType.REASON, code="POLICY_DENIED",
                                message="policy max-8: 16 GPUs > 8").exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements")
@pytest.mark.django_db(transaction=True)
def test_the_submission_insert_is_planned_once(alice, org):
    """The insert is a prepared statement run with a generic plan (settings: plan_cache_mode):
    the server does not plan it again on every POST."""
    for i in range(8):
        assert alice.post("/api/v1/workloads", body(f"p{i}"), format="json").status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                       " WHERE statement LIKE 'WITH w AS (INSERT INTO%%'")
        ((generic, custom),) = cursor.fetchall()
    assert custom == 0 and generic >= 3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's query conversion")
@pytest.mark.django_db(transaction=True)
def test_the_long_submission_insert_is_converted_once(alice, org):
    """The insert is longer than the statements psycopg keeps the conversion of (4 KB): the
    hot cursor keeps it, so a POST does not split and encode it again."""
    cache = db.hot_cursor().cursor._query_cls.cache
    cache.cache_clear()
    for i in range(6):
        assert alice.post("/api/v1/workloads", body(f"c{i}"), format="json").status_code == 201
    info = cache.cache_info()
    assert info.hits >= 5 and info.currsize <= 4, info


@pytest.mark.skipif(connection.vendor != "postgresql",
                    reason="the one-statement insert is PostgreSQL's")
def test_queue_position_read_by_the_insert_equals_a_later_read(org, classes):
    """The 201 answer's position comes from the insert statement itself: it equals what a
    separate read finds, with ties on priority and time, other priorities ahead and behind,
    and admitted work of the queue with and without duration hints."""
    alice = org["alice"]
    now = timezone.now()
    cluster = Cluster.objects.get(name="bj")
    flavor_id = cluster.nodes.first().flavor_id
    for i, (pc, gpus, hint) in enumerate([
            ("training", 1, 3600), ("inference-high", 2, None), ("training", 4, 60),
            ("batch-low", 8, 3600), ("training", 3, 3600), ("inference-high", 1, 10)]):
        w = services.workload_submit(user=alice, now=now - timedelta(seconds=i % 2),
                                     data=body(f"w{i}", gpus=gpus, priority_class=pc,
                                               duration_hint_s=hint), nudge=False)
        at_insert = w._position_rows
        assert at_insert == selectors._position_rows_orm(w)
        fresh = Workload.objects.select_related("priority_class").get(pk=w.pk)
        assert at_insert == selectors._position_rows(fresh)
        if i % 3 == 1:  # admit it: the later ones see an open admission in the queue
            workloads_set_state(Workload.objects.filter(pk=w.pk), WorkloadState.RUNNING)
            Admission.objects.create(workload=w, cluster=cluster, flavor_id=flavor_id,
                                     nodes=["bj-a100-0"], gpus=gpus, reserved_at=now,
                                     running_at=now if i == 1 else None)
    assert len(w._position_rows[2]) == 2


def test_one_statement_insert_writes_what_bulk_create_writes(org, classes):
    """A single submission goes in with one INSERT statement, a batch with bulk_create: the
    rows are the same (but for ids and names), also for a rejected workload's events."""
    from scheduling.models import PodSet, WorkloadEvent

    now = timezone.now()
    alice = org["alice"]
    two_pods = {"pods": [{"count": 2, "flavors": ["a100-80g"], "gpus": 1, "cpu": "0.5",
                          "memory_gib": 16, "gpu_memory_gib": 40},
                         {"count": 1, "flavors": ["a100-80g"], "gpus": 0, "cpu": 2}],
                "topology": {"same": "rack"}, "dataset": "imagenet"}
    for extra in (two_pods, {"pods": [{"count": 5, "flavors": ["a100-80g"], "gpus": 8}]}):
        one = services.workload_submit(user=alice, data=body("one", **extra), now=now,
                                       nudge=False)
        many = services.workloads_submit(user=alice, items=[body("many", **extra),
                                                            body("other", **extra)],
                                         now=now, nudge=False)[0]

        def rows(w):
            workload = Workload.objects.filter(pk=w.pk).values().get()
            pods = list(PodSet.objects.filter(workload=w).order_by("index").values())
            events = list(WorkloadEvent.objects.filter(workload=w).order_by("id").values())
            for r in (workload, *pods, *events):
                for key in ("id", "workload_id", "name"):
                    r.pop(key, None)
            return workload, pods, events

        assert rows(one) == rows(many)
        assert [ps.pk for ps in one.pod_sets.all()] == list(
            PodSet.objects.filter(workload=one).order_by("index").values_list("pk", flat=True))
        assert [e.pk for e in one.events.all()] == list(
            WorkloadEvent.objects.filter(workload=one).order_by("id").values_list("pk",
                                                                                  flat=True))
    assert one.state == WorkloadState.REJECTED


def test_hot_statements_are_prepared_once_per_connection(alice, org):
    """The submission's fixed statements are prepared on the server (not planned again on
    each request); their errors come out as Django's database errors."""
    from django.db import DataError

    for i in range(3):
        assert alice.post("/api/v1/workloads", body(f"p{i}"), format="json").status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [r[0] for r in cursor.fetchall()]
    assert any('FROM "quotas_queue" q' in s for s in prepared), prepared
    assert any("WITH w AS (INSERT INTO" in s for s in prepared), prepared
    assert any("scheduling_admission a" in s for s in prepared), prepared
    with pytest.raises(DataError), db.hot_cursor() as cursor:
        cursor.execute("SELECT 1 / %s", [0])


def test_a_submitted_workloads_lists_filter_on_it(org, classes):
    """The lists the submission hands back (read without a query) are the workload's own:
    filtering them reads the workload's rows only, not every workload's."""
    services.workload_submit(user=org["alice"], data=body("one"), nudge=False)
    second = services.workload_submit(user=org["alice"], data=body("two"), nudge=False)
    assert [e.type for e in second.events.all()] == ["submitted"]
    assert second.events.get(type="submitted").workload_id == second.pk
    assert second.pod_sets.filter(index=0).count() == 1
    assert not second.admissions.exists()
