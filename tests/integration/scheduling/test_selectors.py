"""The workload selectors (scheduling/selectors.py): the queue position read in one query equals
the ORM's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import selectors, services
from scheduling.models import Admission, Cluster, Workload, WorkloadState
from tests.factories import workloads_set_state
from tests.integration.scheduling.conftest import body

pytestmark = pytest.mark.django_db


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
    workloads_set_state(Workload.objects.filter(pk=running.pk), WorkloadState.RUNNING)
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


def test_gpus_total_is_written_with_the_pod_sets_and_cleared_when_they_change(org, classes):
    """The services write a workload's summed GPUs (read by the position from the pending-head
    index); a change of its pod sets outside them clears it (a trigger), and the position
    then reads the pod sets: never a stale sum."""
    from scheduling.models import PodSet

    alice, vision = org["alice"], org["vision"]
    first = services.workload_submit(user=alice, data=body("a", gpus=4), nudge=False)
    batch = services.workloads_submit(user=alice, nudge=False, items=[
        body("b", gpus=2), body("c", gpus=1)])
    assert [Workload.objects.get(pk=w.pk).gpus_total for w in (first, *batch)] == [4, 2, 1]
    last = services.workload_submit(user=alice, data=body("d", gpus=1), nudge=False)
    assert selectors._position_rows(last)[:2] == (3, 7)

    services.workload_update(user=alice, workload=Workload.objects.get(pk=first.pk),
                             changes={"pods": [{"count": 2, "flavors": ["a100-80g"],
                                                "gpus": 3}]})
    assert Workload.objects.get(pk=first.pk).gpus_total == 6

    PodSet.objects.filter(workload_id=batch[0].pk).update(count=5)  # not through a service
    assert Workload.objects.get(pk=batch[0].pk).gpus_total is None
    PodSet.objects.filter(workload_id=batch[1].pk).delete()
    assert Workload.objects.get(pk=batch[1].pk).gpus_total is None
    assert Workload.objects.get(pk=first.pk).gpus_total == 6  # the others keep theirs
    w = Workload.objects.get(pk=last.pk)
    assert selectors._position_rows(w) == selectors._position_rows_orm(w)
    assert selectors._position_rows(w)[:2] == (3, 6 + 10 + 0)
    assert vision.pk == w.queue_id
