"""The fault suite's invariant checks (invariants.py) find what they are meant to: a lost
workload, an undone cancel, an illegal transition, a state that is not its last event, a node
over its GPUs; and nothing on a history the system wrote itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Admission, EventType, WorkloadEvent, WorkloadState
from scheduling.services import workload_cancel, workload_submit
from scheduling.workers.cycle import cycle_run
from tests.chaos.invariants import capacity_violations, history
from tests.integration.scheduling.world import make_world, request

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
S, E = WorkloadState, EventType


def test_a_history_the_system_wrote_holds_every_invariant():
    world = make_world(nodes_per_cluster=1)
    running = workload_submit(user=world.alice, data=request("a", gpus=8), nudge=False)
    waiting = workload_submit(user=world.alice, data=request("b", gpus=8), nudge=False)
    cycle_run(wait=True)
    cancelled = workload_cancel(user=world.alice, workload=waiting)
    out = history([running.pk, waiting.pk], [cancelled.pk])
    assert (out.lost, out.undone_cancels, out.illegal_transitions,
            out.state_not_last_event) == ([], [], [], [])
    assert out.workloads == 2 and out.events >= 4
    assert capacity_violations() == []


def test_each_broken_invariant_is_found():
    world = make_world(nodes_per_cluster=1)
    w = workload_submit(user=world.alice, data=request("a", gpus=8), nudge=False)
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING
    now = timezone.now()
    # A cancel answered 200, then undone: the workload admitted again after it.
    WorkloadEvent.objects.create(workload=w, at=now, type=E.CANCELLED)
    WorkloadEvent.objects.create(workload=w, at=now + timedelta(seconds=1), type=E.ADMITTED)
    # Its GPUs counted twice on the same node: a second open admission of another workload.
    other = workload_submit(user=world.carol, data=request("b", queue="rd/nlp", gpus=8),
                            nudge=False)
    adm = Admission.objects.get(workload=w)
    Admission.objects.create(workload=other, cluster=adm.cluster, flavor=adm.flavor,
                             nodes=adm.nodes, gpus=8, reserved_at=now)
    out = history([w.pk, other.pk, 999_999], [w.pk])
    assert out.lost == [999_999]
    assert out.undone_cancels == [f"workload {w.pk}: state running after a cancel answered 200"]
    assert out.illegal_transitions == [
        f"workload {w.pk}: cancelled -> reserved (event "
        f"{w.events.filter(type=E.ADMITTED).latest('id').pk}, admitted)"]
    assert out.state_not_last_event == [
        f"workload {w.pk}: state running, last state event says reserved"]
    problems = capacity_violations()
    node = adm.nodes[0]
    assert f"portal: node ({adm.cluster_id}, '{node}'): 16 GPUs > 8" in problems
    assert any(p.startswith("portal with held capacity: node ") and "16 GPUs > 8" in p
               for p in problems)
