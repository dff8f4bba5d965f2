"""Two worker processes and a burst of concurrent submissions: invariant I1 holds from the
database while it runs and at the end; no workload is lost or admitted twice."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from decimal import Decimal

import pytest
from django.db import connection

from quotas.selectors import tree_specs
from quotas.tree_rules import validate_tree
from scheduling.models import Admission, EventType, Node, Workload, WorkloadEvent, WorkloadState
from scheduling.request.validation import gpus_shown
from scheduling.selectors import queue_usage
from scheduling.services import workload_submit
from tests.integration.scheduling.stack.stack import CeleryWorker, wait_for
from tests.integration.scheduling.world import make_world, request

S = WorkloadState
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(300)]


def i1_violations() -> list[str]:
    """Invariant I1 read from the database: queue max, fleet capacity, node capacity."""
    problems = []
    report = validate_tree(tree_specs().values())
    for path, keys in queue_usage().items():
        for key, cell in keys.items():
            res = report.resolved.get(path, {}).get(key)
            if res is not None and res.max is not None and cell["used"] > res.max:
                problems.append(f"queue {path} {key}: used {cell['used']} > max {res.max}")
    node_gpus = {(n.cluster_id, n.name): n.gpus for n in Node.objects.all()}
    used: dict[tuple[int, str], int] = defaultdict(int)
    for adm in Admission.objects.filter(ended_at__isnull=True).prefetch_related(
            "workload__pod_sets"):
        k = 0
        for ps in adm.workload.pod_sets.all():
            for _ in range(ps.count):
                used[(adm.cluster_id, adm.nodes[k])] += ps.gpus
                k += 1
    for node, gpus in used.items():
        if gpus > node_gpus.get(node, 0):
            problems.append(f"node {node}: {gpus_shown(gpus)} GPUs > {node_gpus.get(node, 0)}")
    per_cluster: dict[int, int] = defaultdict(int)
    for (cluster, _), gpus in used.items():
        per_cluster[cluster] += gpus
    for cluster, gpus in per_cluster.items():
        capacity = sum(g for (c, _), g in node_gpus.items() if c == cluster)
        if gpus > capacity:
            problems.append(f"cluster {cluster}: {gpus_shown(gpus)} GPUs > capacity {capacity}")
    return problems


def test_two_workers_and_a_burst_keep_i1_and_lose_nothing(celery_worker):
    world = make_world(speedup=120, nodes_per_cluster=2)  # 32 GPUs; rd max 32, leaves 24
    second = CeleryWorker("allot-test-w2", beat=False).start()
    stop = threading.Event()
    seen: list[str] = []
    checks = [0]

    def checker():
        try:
            while not stop.is_set():
                seen.extend(i1_violations())
                checks[0] += 1
                time.sleep(0.1)
        finally:
            connection.close()

    users = {"rd/vision": world.alice, "rd/nlp": world.carol}
    submitted: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def burst(t: int):
        try:
            for i in range(10):
                queue = "rd/vision" if (t + i) % 2 else "rd/nlp"
                w = workload_submit(user=users[queue], data=request(
                    f"burst-{t}-{i}", queue=queue, gpus=(4, 8)[i % 2],
                    count=1 + (i % 3 == 0), duration_hint_s=240 + 60 * (i % 4),
                    termination_grace_s=1))
                with lock:
                    submitted.append(w.pk)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))
        finally:
            connection.close()

    watcher = threading.Thread(target=checker)
    watcher.start()
    try:
        threads = [threading.Thread(target=burst, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(submitted) == 60
        wait_for(lambda: Workload.objects.filter(pk__in=submitted, state=S.FINISHED).count()
                 == 60, timeout=240, interval=1,
                 what=f"all 60 finished; states "
                 f"{list(Workload.objects.values_list('state', flat=True))}")
    finally:
        stop.set()
        watcher.join()
        second.stop()
    assert checks[0] > 10
    assert seen == []
    assert i1_violations() == []
    # Nothing lost, nothing admitted twice: one open-or-finished admission per admitted
    # event, exactly one finished event each, no open admission left.
    for pk in submitted:
        admitted = WorkloadEvent.objects.filter(workload_id=pk, type=EventType.ADMITTED).count()
        assert Admission.objects.filter(workload_id=pk).count() == admitted
        assert WorkloadEvent.objects.filter(workload_id=pk, type=EventType.FINISHED).count() == 1
    assert not Admission.objects.filter(ended_at__isnull=True).exists()
    total = Admission.objects.filter(workload_id__in=submitted, end_reason="finished").count()
    assert total == 60
    # Both workers took part.
    assert "Task scheduling." in second.tail(400)
    assert Decimal(0) == sum((c["used"] for c in queue_usage().get("rd", {}).values()),
                             Decimal(0))
