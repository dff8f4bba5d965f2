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
from tests.factories import FlavorFactory
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
    Workload.objects.filter(pk=running.pk).update(state=WorkloadState.RUNNING)
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
