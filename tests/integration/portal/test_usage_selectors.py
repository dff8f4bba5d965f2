"""Queue usage as the tree pages and /api/v1/queues read it: pending demand summed in SQL
equals the sum over the pending pod sets, and the read costs a fixed number of queries."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import PodSet, Workload, WorkloadState
from scheduling.selectors import queue_usage
from tests.factories import FlavorFactory, workloads_set_state
from tests.integration.portal.conftest import submit

pytestmark = pytest.mark.django_db


def expected_pending() -> dict[str, dict[tuple[str, str], Decimal]]:
    """The demand of pending work on its first acceptable flavor, summed up the tree, from the
    pod set rows one by one."""
    out: dict[str, dict[tuple[str, str], Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for ps in PodSet.objects.filter(workload__state=WorkloadState.PENDING).select_related(
            "workload__queue"):
        if not ps.flavors:
            continue
        parts = ps.workload.queue.path.split("/")
        for i in range(len(parts), 0, -1):
            path = "/".join(parts[:i])
            for resource, amount in (("gpu", ps.gpus), ("cpu", ps.cpu),
                                     ("memory", ps.memory_gib)):
                out[path][(ps.flavors[0], resource)] += ps.count * Decimal(amount)
    return out


def test_pending_demand_summed_in_sql_equals_the_pod_sets(org, priority_classes):
    h100 = FlavorFactory(name="h100-80g", gpu_memory_gib=80)
    submit(org.alice, name="a", pods=[
        {"count": 2, "flavors": ["a100-80g", h100.name], "gpus": 4, "cpu": "2.5",
         "memory_gib": "10.25"},
        {"count": 3, "flavors": ["a100-80g", h100.name], "gpus": 1, "cpu": 1,
         "memory_gib": 4}])
    assert Workload.objects.filter(state=WorkloadState.PENDING).count() == 1
    # Pending demand counts on the first acceptable flavor (no h100 nodes: a100 would run it).
    submit(org.alice, name="b", pods=[{"count": 1, "flavors": [h100.name, "a100-80g"],
                                       "gpus": 2, "cpu": 8, "memory_gib": 64}])
    running = submit(org.alice, name="c")
    workloads_set_state(Workload.objects.filter(pk=running.pk), WorkloadState.RUNNING)
    submit(org.carol, name="d", queue="rd/nlp")
    empty = submit(org.carol, name="e", queue="rd/nlp")
    PodSet.objects.filter(workload=empty).update(flavors=[])  # no flavor: no demand anywhere

    usage = queue_usage()
    expected = expected_pending()
    assert set(expected) == {"rd", "rd/vision", "rd/nlp"}
    for path, keys in expected.items():
        for key, amount in keys.items():
            assert usage[path][key]["pending"] == amount, (path, key)
    assert usage["rd"][(h100.name, "gpu")]["pending"] == 2
    assert usage["rd"][("a100-80g", "gpu")]["pending"] == 2 * 4 + 3 + expected["rd/nlp"][
        ("a100-80g", "gpu")]


def test_queue_usage_queries_do_not_grow_with_pending_work(org, priority_classes):
    for i in range(3):
        submit(org.alice, name=f"w{i}")
    with CaptureQueriesContext(connection) as few:
        queue_usage()
    for i in range(20):
        submit(org.alice, name=f"x{i}")
    with CaptureQueriesContext(connection) as many:
        queue_usage()
    assert len(many.captured_queries) == len(few.captured_queries) == 3


def test_waits_computed_in_the_database_equal_the_orm(org, priority_classes):
    """The fleet page's waits (minutes from submission to the first admission): the one-float-
    per-row SQL reads what the ORM path computes, with several admissions per workload, a
    queue filter, and work submitted before the window left out."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.pages import selectors as page_selectors
    from scheduling.models import Admission

    now = timezone.now()
    flavor = FlavorFactory(name="v100-32g", gpu_memory_gib=32)
    for i, (user, queue) in enumerate([(org.alice, "rd/vision"), (org.carol, "rd/nlp")] * 3):
        w = submit(user, name=f"w{i}", queue=queue)
        Workload.objects.filter(pk=w.pk).update(submitted_at=now - timedelta(hours=i + 1))
        n = i % 3 + 1
        for k in range(n):  # the first admission counts, not the later (ended) ones
            at = now - timedelta(minutes=37 * (i + 1) - k * 5)
            Admission.objects.create(workload=w, cluster=org.cluster, flavor=flavor, gpus=1,
                                     reserved_at=at,
                                     ended_at=None if k == n - 1 else at + timedelta(minutes=1))
    old = submit(org.alice, name="old")
    Workload.objects.filter(pk=old.pk).update(submitted_at=now - timedelta(days=9))
    Admission.objects.create(workload=old, cluster=org.cluster, flavor=flavor, gpus=1,
                             reserved_at=now)
    start = now - timedelta(days=7)
    for queue_ids in (None, frozenset({org.nlp.pk})):
        admitted = Workload.objects.filter(submitted_at__gte=start, admissions__isnull=False)
        if queue_ids is not None:
            admitted = admitted.filter(queue_id__in=queue_ids)
        expected = sorted(
            (w.queue.path, (min(a.reserved_at for a in w.admissions.all()) - w.submitted_at)
             .total_seconds() / 60) for w in admitted.distinct())
        got = sorted(page_selectors._admitted_waits(start, queue_ids, admitted))
        assert [p for p, _ in got] == [p for p, _ in expected]
        assert [m for _, m in got] == pytest.approx([m for _, m in expected])
        assert len(got) == (6 if queue_ids is None else 3)


def test_queue_waits_pending_count_and_oldest(org, priority_classes):
    """Pending work per queue: how many, and how long the oldest has waited (minutes)."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.pages import selectors as page_selectors

    now = timezone.now()
    for i, (user, queue) in enumerate([(org.alice, "rd/vision")] * 3 + [(org.carol, "rd/nlp")]):
        w = submit(user, name=f"p{i}", queue=queue)
        Workload.objects.filter(pk=w.pk).update(submitted_at=now - timedelta(minutes=10 * i))
    future = submit(org.carol, name="clock-skew", queue="rd/nlp")
    Workload.objects.filter(pk=future.pk).update(submitted_at=now + timedelta(minutes=5))
    rows = {r["queue"]: r for r in page_selectors.queue_waits(
        start=now - timedelta(days=7), now=now)}
    assert (rows["rd/vision"]["pending"], rows["rd/vision"]["pending_max_min"]) == (3, 20.0)
    assert (rows["rd/nlp"]["pending"], rows["rd/nlp"]["pending_max_min"]) == (2, 30.0)
    only_nlp = page_selectors.queue_waits(start=now - timedelta(days=7), now=now,
                                          queue_ids=frozenset({org.nlp.pk}))
    assert [r["queue"] for r in only_nlp] == ["rd/nlp"]
