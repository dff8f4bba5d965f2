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
from tests.integration.scheduling.world import make_world, submit

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


def test_pod_set_specs_are_built_once_per_row_list():
    make_world(nodes_per_cluster=1)
    rows = [{"count": 2, "flavors": ["a100-80g"], "gpus": Decimal(1), "cpu": Decimal(4),
             "memory_gib": Decimal(16), "gpu_memory_gib": None, "resources": {}}]
    specs = snapshot._pod_set_specs(rows)
    assert specs[0].count == 2 and specs[0].gpus == 1.0 and specs[0].cpu == 4.0
    assert snapshot._pod_set_specs(rows) is specs
    changed = [{**rows[0], "count": 3}]  # a workload changed in place: a new list
    assert snapshot._pod_set_specs(changed)[0].count == 3
    assert snapshot.build_snapshot(timezone.now())[0].pending == ()
