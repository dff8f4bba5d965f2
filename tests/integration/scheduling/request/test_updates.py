"""Changing a pending workload (scheduling/request/updates.py) while a cycle is in flight:
the change waits for the cycle, so the cycle's decision on the old request is never written
over a changed one (the API's update and resubmit paths: tests/integration/policies/)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Admission, PodSet, WorkloadState
from scheduling.request.updates import workload_update
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.races import cycle_held, in_thread
from tests.integration.scheduling.world import make_world, request


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_an_update_during_a_cycle_waits_for_it_and_is_refused_once_admitted(settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    world = make_world(cluster_names=("bj",), nodes_per_cluster=1)
    w = workload_submit(user=world.alice, data=request("raced", gpus=8), nudge=False)
    bigger = request("raced", gpus=4, count=2)["pods"]
    updates: list = []

    def admits_it(snapshot, result):
        assert [a.workload for a in result.admitted] == [str(w.pk)]

    with cycle_held(admits_it) as cycles:
        update = in_thread(lambda: workload_update(
            user=world.alice, workload=w, changes={"pods": bigger}), updates)
        update.join(1.0)
        # The update waits for the cycle that already decided to admit the old request.
        assert update.is_alive() and updates == []
    update.join(20)
    assert cycles[0].admitted == [w.pk]
    assert len(updates) == 1 and isinstance(updates[0], ValidationError)
    assert "is reserved: only a pending workload can be changed" in str(updates[0])
    w.refresh_from_db()
    assert w.state == WorkloadState.RESERVED
    # The admitted request is the stored one: one pod of 8 GPUs, admitted as 8 GPUs.
    assert list(PodSet.objects.filter(workload=w).values_list("count", "gpus")) == [(1, 8)]
    assert Admission.objects.get(workload=w).gpus == 8
    cycle_run(wait=True)
    assert Admission.objects.get(workload=w).gpus == 8
