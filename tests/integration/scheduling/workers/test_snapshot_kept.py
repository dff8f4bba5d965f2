"""What a cycle's snapshot keeps per process (scheduling/workers/snapshot.py): the resolved
quota tree until the change log says the configuration changed, and each workload's pod-set
specs until its pod sets change. Committed changes (transactional tests): what another
process commits must reach the next cycle."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from core import changes
from quotas.models import QuotaEntry
from scheduling.workers import snapshot
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import make_world, request, submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_caches():
    changes.reset()
    yield
    changes.reset()


def test_the_tree_is_kept_until_a_quota_changes_and_then_read_again():
    if connection.vendor != "postgresql":
        pytest.skip("the change log is PostgreSQL's")
    make_world(nodes_per_cluster=1)
    first = snapshot._tree()
    assert snapshot._tree() is first  # nothing changed: the same resolved tree
    assert first[1].resolved["rd/vision"][("a100-80g", "gpu")].min == 8
    with transaction.atomic():
        QuotaEntry.objects.filter(queue__path="rd/vision", resource="gpu").update(
            min=Decimal(4), min_base=4)
    again = snapshot._tree()
    assert again is not first
    assert again[1].resolved["rd/vision"][("a100-80g", "gpu")].min == 4
    assert snapshot._tree() is again


def test_a_quota_change_reaches_the_next_cycle():
    if connection.vendor != "postgresql":
        pytest.skip("the change log is PostgreSQL's")
    w = make_world(nodes_per_cluster=1)
    cycle_run(wait=True)  # the tree is read and kept
    QuotaEntry.objects.filter(queue__path="rd/vision", resource="gpu").update(
        min=Decimal(0), min_base=0, max=Decimal(0), max_base=0)
    job = submit(w, "after-the-change", gpus=8)
    report = cycle_run(wait=True)
    assert job.pk not in report.admitted  # vision's new max (0) holds it back


def test_pod_set_specs_are_built_once_per_workload_and_read_again_when_changed():
    from scheduling.request.updates import workload_update

    w = make_world(nodes_per_cluster=1)
    job = submit(w, "waits", gpus=1, count=2)  # pending (no cycle runs here)
    first = _pending_specs(job.pk)
    assert first[0].count == 2 and first[0].gpus == 1.0 and first[0].cpu == 8.0
    assert _pending_specs(job.pk) is first  # the next cycle's: the same specs, not rebuilt
    body = request("waits", gpus=1, count=3)
    workload_update(user=w.alice, workload=job, changes={"pods": body["pods"]})
    assert _pending_specs(job.pk)[0].count == 3  # its pod sets changed: built again


def _pending_specs(pk):
    snap, _ = snapshot.build_snapshot(timezone.now())
    return next(p.pod_sets for p in snap.pending if p.name == str(pk))
