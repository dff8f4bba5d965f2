"""POST /api/v1/workloads on its fast path: the 201 body is what a GET reads back, the queue
position summed in SQL equals the ORM's, and a submission costs a fixed number of queries."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core import db
from quotas.models import Queue
from scheduling import enqueue, extensions, selectors, services
from scheduling.api_workloads import WorkloadDetailSerializer, workload_detail_data
from scheduling.models import Admission, Cluster, PriorityClass, Workload, WorkloadState
from tests.integration.api.conftest import client_for

pytestmark = pytest.mark.django_db


def body(name: str, *, gpus: int = 1, count: int = 1, **extra):
    out = {"name": name, "queue": "rd/vision", "priority_class": "training",
           "duration_hint_s": 3600, "image": "registry.local/train:1.4",
           "command": ["python", "train.py"], "labels": {"team": "vision"},
           "pods": [{"count": count, "flavors": ["a100-80g"], "gpus": gpus, "cpu": "4.5",
                     "memory_gib": 16}]}
    out.update(extra)
    return out


def same(created: dict, read: dict) -> bool:
    """Equal, but for the estimated start of a pending workload: 'now' when nothing runs in
    its queue, so it moves between the two requests."""
    def strip(d: dict) -> dict:
        if d.get("queue_position"):
            assert d["queue_position"]["estimated_start"] is not None
            d = {**d, "queue_position": {**d["queue_position"], "estimated_start": None}}
        return d

    return strip(created) == strip(read)


@pytest.fixture
def classes(db):
    for name, value, can in (("inference-high", 10000, True), ("training", 1000, False),
                             ("batch-low", 100, False)):
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value,
                                                                 "can_preempt": can})


@pytest.fixture
def alice(org, classes):
    return client_for(org["alice"])


def test_created_body_is_what_a_get_reads_back(alice, org):
    first = alice.post("/api/v1/workloads", body("first", gpus=4), format="json")
    assert first.status_code == 201, first.content
    second = alice.post("/api/v1/workloads", body("second", gpus=2), format="json")
    assert second.status_code == 201, second.content
    created = second.json()
    assert same(created, alice.get(f"/api/v1/workloads/{created['id']}").json())
    assert created["state"] == "pending" and created["team"] == "vision"
    assert created["queue_position"]["in_queue"] == 2
    assert created["queue_position"]["ahead_gpus"] == 4
    assert created["pod_sets"][0]["cpu"] == 4.5 and created["gpus"] == 2
    assert [e["type"] for e in created["events"]] == ["submitted"]
    assert created["events"][0]["actor"] == "alice"
    assert created["pods"] == [{"name": f"allot-w{created['id']}-0-0", "pod_set": 0,
                                "node": None, "phase": ""}]


def test_rejected_and_held_bodies_are_what_a_get_reads_back(alice, org):
    # rd's max is 32 A100 GPUs: 5 x 8 = 40 can never fit.
    rejected = alice.post("/api/v1/workloads", body("huge", gpus=8, count=5), format="json")
    assert rejected.status_code == 201
    out = rejected.json()
    assert out["state"] == "rejected" and out["reasons"] and out["queue_position"] is None
    assert same(out, alice.get(f"/api/v1/workloads/{out['id']}").json())

    # Above the approval threshold of hours: held with the reason and a policy event.
    held = alice.post("/api/v1/workloads", body("long", duration_hint_s=100 * 3600),
                      format="json").json()
    assert held["reason"]["code"] == "NEEDS_APPROVAL"
    assert [e["type"] for e in held["events"]] == ["submitted", "policy"]
    assert same(held, alice.get(f"/api/v1/workloads/{held['id']}").json())


def test_policy_verdict_is_in_the_created_body(alice, org):
    def lower(ctx):
        return extensions.SubmissionVerdict(priority_class="batch-low",
                                            audit=["lowered by test policy"])

    extensions.register_submission_check(lower)
    try:
        out = alice.post("/api/v1/workloads", body("lowered"), format="json").json()
    finally:
        extensions.unregister_submission_check(lower)
    assert out["priority_class"] == "batch-low"
    assert [e["message"] for e in out["events"] if e["type"] == "policy"] == [
        "lowered by test policy", "priority class training -> batch-low (set by policy)"]
    assert same(out, alice.get(f"/api/v1/workloads/{out['id']}").json())


def test_detail_data_has_the_serializers_fields(org, classes):
    """What the detail answers (the serializer returns `workload_detail_data`) has exactly the
    fields the serializer declares for the schema, for a pending and an admitted workload."""
    w = services.workload_submit(user=org["alice"], data=body("adm", count=2), nudge=False)
    cluster = Cluster.objects.get(name="bj")
    now = timezone.now()
    Admission.objects.create(workload=w, cluster=cluster, flavor_id=cluster.nodes.first().flavor_id,
                             nodes=["bj-a100-0", "bj-a100-1"], gpus=2, cpu=Decimal(9),
                             memory_gib=Decimal(32), reserved_at=now,
                             running_at=now + timedelta(seconds=3))
    pending = services.workload_submit(user=org["alice"], data=body("p", gpus=2), nudge=False)
    declared = set(WorkloadDetailSerializer().fields)
    for pk in (w.pk, pending.pk):
        loaded = selectors.workload_get(user=org["alice"], pk=pk)
        assert set(workload_detail_data(loaded)) == declared
        with mock.patch("django.utils.timezone.now", return_value=now):
            assert WorkloadDetailSerializer(loaded).data == workload_detail_data(loaded)
    admitted = workload_detail_data(selectors.workload_get(user=org["alice"], pk=w.pk))
    assert admitted["admission"]["nodes"] == ["bj-a100-0", "bj-a100-1"]
    assert [p["node"] for p in admitted["pods"]] == ["bj-a100-0", "bj-a100-1"]


def test_queue_position_sql_equals_orm(org, classes):
    """Ties on priority and submission time, other queues, admitted work with and without
    duration hints: the one-query position reads what the ORM reads."""
    alice, vision = org["alice"], org["vision"]
    now = timezone.now()
    submitted = []
    for i, (pc, gpus) in enumerate([("training", 1), ("inference-high", 2), ("training", 4),
                                    ("batch-low", 8), ("training", 3)]):
        w = services.workload_submit(user=alice, now=now - timedelta(seconds=i % 2),
                                     data=body(f"w{i}", gpus=gpus, priority_class=pc),
                                     nudge=False)
        submitted.append(w)
    running = services.workload_submit(user=alice, data=body("r", gpus=2), nudge=False)
    Workload.objects.filter(pk=running.pk).update(state=WorkloadState.RUNNING)
    cluster = Cluster.objects.get(name="bj")
    Admission.objects.create(workload=running, cluster=cluster,
                             flavor_id=cluster.nodes.first().flavor_id, nodes=["bj-a100-0"],
                             gpus=2, reserved_at=now)
    for w in Workload.objects.filter(queue=vision, state=WorkloadState.PENDING):
        assert selectors._position_rows(w) == selectors._position_rows_orm(w)
    positions = {w.name: selectors.workload_queue_position(w, now=now)["in_queue"]
                 for w in Workload.objects.filter(queue=vision, state=WorkloadState.PENDING)}
    # Higher priority first, then earlier submission, then the lower id.
    assert positions == {"w1": 1, "w0": 2, "w2": 3, "w4": 4, "w3": 5}


@pytest.mark.django_db(transaction=True)
def test_post_query_budget(alice, org):
    """A warm POST (committed data, as in production): no token query (cached), the change
    log's check (1: the queue lookup, classes, flavors, policies, budgets and the engine's
    impossibility check are cached until a table they come from changes), and one INSERT
    statement for the workload, its pod sets and its events that also reads the queue
    position; BEGIN and COMMIT around them."""
    alice.post("/api/v1/workloads", body("warm"), format="json")
    with CaptureQueriesContext(connection) as ctx:
        r = alice.post("/api/v1/workloads", body("counted"), format="json")
    assert r.status_code == 201, r.content
    assert r.json()["queue_position"]["in_queue"] == 2
    sqls = [q["sql"] for q in ctx.captured_queries]
    if connection.vendor != "postgresql":
        assert len(sqls) <= 12, "\n".join(s[:120] for s in sqls)
        return
    assert not any("portal_apitoken" in s for s in sqls), sqls
    assert sum("INSERT" in s for s in sqls) == 1, sqls
    assert len(sqls) == 4, "\n".join(s[:120] for s in sqls)


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
            Workload.objects.filter(pk=w.pk).update(state=WorkloadState.RUNNING)
            Admission.objects.create(workload=w, cluster=cluster, flavor_id=flavor_id,
                                     nodes=["bj-a100-0"], gpus=gpus, reserved_at=now,
                                     running_at=now if i == 1 else None)
    assert len(w._position_rows[2]) == 2


def test_batch_submission_reads_queues_once(org, classes):
    """Ten workloads on two leaves: the queues and their teams are one query, not one each."""
    admin = org["admin"]
    items = [body(f"b{i}", queue="rd/vision" if i % 2 else "rd/nlp") for i in range(10)]
    with CaptureQueriesContext(connection) as ctx:
        out = services.workloads_submit(user=admin, items=items, nudge=False)
    assert [w.team.name for w in out] == ["nlp", "vision"] * 5
    queue_reads = [q for q in ctx.captured_queries if 'FROM "quotas_queue" q' in q["sql"]]
    assert len(queue_reads) == 1


def test_team_and_permission_from_ancestor_grants(org, classes):
    """A team granted the parent may submit to its leaves and is the team accounted; a user in
    no granted team is refused; an admin is accounted to the granting team."""
    from quotas.models import Team, TeamMembership

    rd = Queue.objects.get(path="rd")
    dept = Team.objects.create(name="dept")
    dept.queues.add(rd)
    carol = org["alice"].__class__.objects.create(username="carol")
    TeamMembership.objects.create(team=dept, user=carol)
    w = services.workload_submit(user=carol, data=body("c", queue="rd/nlp"), nudge=False)
    assert w.team.name == "dept"
    # alice is in vision (granted rd/vision): her own team wins over the department's.
    w = services.workload_submit(user=org["alice"], data=body("a"), nudge=False)
    assert w.team.name == "vision"
    dave = org["alice"].__class__.objects.create(username="dave")
    with pytest.raises(ValidationError, match="none of your teams may use"):
        services.workload_submit(user=dave, data=body("d"), nudge=False)
    w = services.workload_submit(user=org["admin"], data=body("x", queue="rd/nlp"),
                                 nudge=False)
    assert w.team.name == "nlp"


def test_nudges_are_debounced(org, classes, django_capture_on_commit_callbacks):
    """Many submissions in a row send one nudge to the broker, not one each."""
    enqueue._next_nudge_eta = 0.0
    with mock.patch("scheduling.tasks.scheduling_cycle.apply_async") as send, \
            mock.patch.object(enqueue, "_NUDGE_WINDOW_S", 600.0):
        for i in range(20):
            with django_capture_on_commit_callbacks(execute=True):
                services.workload_submit(user=org["alice"], data=body(f"n{i}"))
    assert send.call_count == 1
    assert send.call_args.kwargs["kwargs"] == {"nudged": True}
    enqueue._next_nudge_eta = 0.0


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
