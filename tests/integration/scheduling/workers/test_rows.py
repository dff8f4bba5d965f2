"""The workload rows a cycle reads (scheduling/workers/rows.py): what never changes after
submission is kept per process, and read again when a pending workload is changed in place; a
nominated preemptor is read even beyond the heads of its queue, with its nomination."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import engine
from scheduling.models import Workload, WorkloadState
from scheduling.services import workload_submit
from scheduling.workers.cycle import cycle_run
from scheduling.workers.snapshot import build_snapshot, nomination_json
from tests.integration.scheduling.world import request, submit

S = WorkloadState


@pytest.fixture
def world(world_dispatch_in_cycle):
    """Dispatch inside the cycle (conftest.py): an admitted workload runs at once."""
    return world_dispatch_in_cycle


def test_a_pending_workload_changed_in_place_is_read_again(world):
    from scheduling.request.updates import workload_update

    hog = workload_submit(user=world.carol, data=request("hog", queue="rd/nlp", count=2))
    workload_submit(user=world.carol, data=request("hog2", queue="rd/nlp", count=1))
    cycle_run(wait=True)  # nlp holds 24 of rd's 32
    w = submit(world, "shrinks", count=2)  # 16 more GPUs: over rd's max, it waits
    cycle_run(wait=True)  # the cycle reads (and keeps) w's pod sets
    assert Workload.objects.get(pk=w.pk).state == S.PENDING
    assert Workload.objects.get(pk=hog.pk).state == S.RUNNING
    body = request("shrinks", count=1)
    workload_update(user=world.alice, workload=w, changes={"pods": body["pods"]})
    cycle_run(wait=True)
    w.refresh_from_db()
    assert w.state == S.RUNNING and w.admissions.get().gpus == 8  # the new request


def test_a_workload_submitted_after_the_cycle_began_waits_for_the_next(world):
    """A submission that commits while a cycle reads (its submission time after the cycle's
    `now`) is left to the next cycle, so no workload is admitted before it was submitted."""
    w = submit(world, "late")
    before = w.submitted_at - timedelta(seconds=1)
    report = cycle_run(wait=True, now=before)
    assert w.pk not in report.admitted
    assert Workload.objects.get(pk=w.pk).state == S.PENDING
    report = cycle_run(wait=True)
    assert w.pk in report.admitted
    events = list(w.events.order_by("at", "id").values_list("type", "at"))
    assert [t for t, _ in events][:2] == ["submitted", "admitted"]
    assert events[0][1] <= events[1][1]


def test_a_nominated_preemptor_beyond_the_heads_is_read_with_its_nomination(world, settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "max_pending_per_queue": 1}
    head = submit(world, "head", priority_class="inference-high")
    behind = submit(world, "behind")
    nom = engine.Nomination(flavor="a100-80g", at=100.0, victims=(engine.NominatedVictim(
        name="7", queue="rd/nlp", cluster="bj", nodes=("bj-a100-0", "bj-a100-1"),
        pods=((8, 8.0, 64.0), (8, 8.0, 64.0))),))
    Workload.objects.filter(pk=behind.pk).update(nomination=nomination_json(nom))
    snapshot, _ = build_snapshot(timezone.now())
    assert sorted(w.name for w in snapshot.pending) == sorted([str(head.pk), str(behind.pk)])
    assert snapshot.nominations == {str(behind.pk): nom}
