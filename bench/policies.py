"""Policy figures: `python -m bench.policies`.

1. Added latency of 100 policies (80 validate, 20 priority) on one submission: the CEL
   evaluation alone, and the whole submission check (load policies, build the context from the
   database, evaluate, count hits), p50/p95 over many submissions.
2. Cost of limit and placement policies per scheduling cycle at 1,000 queues (10 limit and
   10 placement policies, 2,000 pending workloads): evaluation alone and the whole adjuster.

Runs on a throwaway test database (DATABASE_URL's server, or SQLite in memory by default).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# PostgreSQL, as in production (the change-log caches exist there only; SQLite reads every time).
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
# Its own throwaway database: never the one a test run (TEST_DATABASE_NAME) is using.
os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_POLICIES_DB",
                                                  "test_allot_bench_policies")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

# DEBUG (the local default) logs every query: measure without that overhead, as in production.
settings.DEBUG = False

SUBMISSIONS = 500
CYCLES = 5
DEPARTMENTS, LEAVES = 10, 99  # 10 + 990 = 1,000 queues
PENDING = 2000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn: Callable[[], Any], n: int, clock: Callable[[], float] = time.perf_counter
          ) -> list[float]:
    out = []
    for _ in range(n):
        start = clock()
        fn()
        out.append((clock() - start) * 1000)
    return out


def build_fleet() -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from quotas.models import Flavor, Queue, QuotaEntry, Team
    from scheduling.models import Cluster, Node

    a100 = Flavor.objects.create(name="a100-80g", gpu_memory_gib=80)
    h100 = Flavor.objects.create(name="h100-80g", gpu_memory_gib=80)
    for c, region in enumerate(("east", "east", "north", "west")):
        cluster = Cluster.objects.create(name=f"c{c}", region=region)
        Node.objects.bulk_create([
            Node(cluster=cluster, name=f"c{c}-n{i}", flavor=a100 if i % 4 else h100, gpus=8,
                 cpu=Decimal(64), memory_gib=Decimal(512)) for i in range(32)])
    leaves = []
    for d in range(DEPARTMENTS):
        dept = Queue.objects.create(name=f"d{d}")
        QuotaEntry.objects.create(queue=dept, flavor=a100, min=Decimal(0), max=Decimal(256))
        for leaf in range(LEAVES):
            leaves.append(Queue(parent=dept, name=f"t{leaf}"))
    for q in leaves:
        q.path, q.depth = q.compute_path()
    Queue.objects.bulk_create(leaves)
    user = get_user_model().objects.create_user("bench", password="x")
    team = Team.objects.create(name="bench")
    first = Queue.objects.get(path="d0/t0")
    team.queues.add(first)
    return {"user": user, "team": team, "queue": first}


def submission_policies() -> list[dict[str, Any]]:
    rules = [
        ('request.flavors.exists(f, f.startsWith("h100"))', '"h100" in team.approvals'),
        ("true", "request.gpus <= 64"),
        ('request.queue.startsWith("d0/")', 'fleet.utilisation["a100-80g"] < 0.99'),
        ("request.pods > 0", "request.gpus / request.pods <= 8"),
        ("true", "now.hour >= 0 && size(request.labels) < 20"),
        ('"kind" in request.labels', 'request.labels["kind"] != "forbidden"'),
        ("true", 'queue.used["a100-80g/gpu"] + request.gpus <= queue.max["a100-80g/gpu"]'),
        ("true", "cost_center.over_budget == false"),
    ]
    out = []
    for i in range(80):
        match, rule = rules[i % len(rules)]
        out.append({"name": f"v{i:03d}", "kind": "validate", "mode": "enforce", "match": match,
                    "rule": rule, "message": f'"rule {i}: " + string(request.gpus) + " GPUs"'})
    for i in range(20):
        out.append({"name": f"p{i:03d}", "kind": "priority", "mode": "enforce",
                    "match": f'"role" in request.labels && request.labels["role"] == "r{i}"',
                    "rule": '"inference-high"'})
    return out


def cycle_policies() -> list[dict[str, Any]]:
    out = []
    for i in range(10):
        out.append({"name": f"l{i:03d}", "kind": "limit", "mode": "enforce",
                    "key": "a100-80g/gpu", "match": f'queue.path.startsWith("d{i}/")',
                    "rule": 'fleet.utilisation["a100-80g"] < 0.4 ? 32 : 16'})
        out.append({"name": f"pl{i:03d}", "kind": "placement", "mode": "enforce",
                    "match": f'"kind" in request.labels && request.labels["kind"] == "k{i}"',
                    "rule": '["east"]'})
    return out


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start; database: "
          f"{connection.vendor}")
    from policies.active import active_specs
    from policies.context import submission_variables
    from policies.cycle import cycle_evaluate, policy_cycle_adjuster
    from policies.evaluation import evaluate_request
    from policies.models import CYCLE_KINDS, SUBMISSION_KINDS
    from policies.services import policy_create
    from policies.submission import policy_submission_check
    from scheduling.extensions import CycleContext, PendingInfo, SubmissionContext

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        fleet = build_fleet()
        request = {"name": "sweep", "queue": "d0/t0", "priority_class": "training",
                   "labels": {"kind": "train"},
                   "pods": [{"count": 2, "flavors": ["a100-80g"], "gpus": 8}]}
        ctx = SubmissionContext(user=fleet["user"], queue=fleet["queue"], team=fleet["team"],
                                request=request)

        baseline = timed(lambda: policy_submission_check(ctx), SUBMISSIONS)
        for data in submission_policies():
            policy_create(user=None, data=data)
        specs = active_specs(SUBMISSION_KINDS)
        variables = submission_variables(data=request, queue=fleet["queue"],
                                         team=fleet["team"], user=fleet["user"])
        assert evaluate_request(specs, variables).allowed
        eval_only = timed(lambda: evaluate_request(specs, variables), SUBMISSIONS)
        # CPU time of this process: what the evaluation costs, without the waits for a core
        # that a loaded machine adds to wall-clock percentiles.
        eval_cpu = timed(lambda: evaluate_request(specs, variables), SUBMISSIONS,
                         clock=time.process_time)
        # The whole check, interleaved with its one query alone (the change-log check): on a
        # loaded machine the wall-clock tail is the database round trip waiting for a core.
        from core import changes

        full, trip = [], []
        for _ in range(SUBMISSIONS):
            start = time.perf_counter()
            changes.validate()
            trip.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            policy_submission_check(ctx)
            full.append((time.perf_counter() - start) * 1000)
        full_cpu = timed(lambda: policy_submission_check(ctx), SUBMISSIONS,
                         clock=time.process_time)
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            policy_submission_check(ctx)
        warm_queries = len(queries)
        # Right after a write to what the context reads (here: an admission statement, as each
        # scheduling cycle makes), the changed piece is read again: the price of a cache miss.
        from scheduling.models import Admission

        def after_a_change() -> None:
            Admission.objects.filter(pk=-1).update(ended_at=None)

        missed = []
        for _ in range(SUBMISSIONS):
            after_a_change()
            start = time.perf_counter()
            policy_submission_check(ctx)
            missed.append((time.perf_counter() - start) * 1000)
        after_a_change()
        with CaptureQueriesContext(connection) as queries:
            policy_submission_check(ctx)
        print(f"submission, {len(specs)} policies (80 validate, 20 priority), "
              f"{SUBMISSIONS} runs:")
        print(f"  CEL evaluation only:      p50 {pct(eval_only, .5):.3f} ms, "
              f"p95 {pct(eval_only, .95):.3f} ms")
        print(f"  CEL evaluation, CPU time: p50 {pct(eval_cpu, .5):.3f} ms, "
              f"p95 {pct(eval_cpu, .95):.3f} ms")
        print(f"  whole check, no policies: p50 {pct(baseline, .5):.3f} ms, "
              f"p95 {pct(baseline, .95):.3f} ms")
        print(f"  whole check, CPU time:    p50 {pct(full_cpu, .5):.3f} ms, "
              f"p95 {pct(full_cpu, .95):.3f} ms")
        print(f"  its one query alone:      p50 {pct(trip, .5):.3f} ms, "
              f"p95 {pct(trip, .95):.3f} ms")
        print(f"  whole check after a write to the context ({len(queries)} queries): "
              f"p50 {pct(missed, .5):.3f} ms, p95 {pct(missed, .95):.3f} ms")
        print(f"  ADDED LATENCY, 100 policies on one submission (the whole check, "
              f"{warm_queries} query): p50 {pct(full, .5):.3f} ms, "
              f"p95 {pct(full, .95):.3f} ms  (target p95 < 2 ms)")

        for data in cycle_policies():
            policy_create(user=None, data=data)
        from quotas.models import Queue

        paths = list(Queue.objects.values_list("path", flat=True))
        leaves = [p for p in paths if "/" in p]
        pending = [
            PendingInfo(id=10_000_000 + i, name=f"w{i}", queue_path=leaves[i % len(leaves)],
                        team="bench", owner="bench", priority_class="training",
                        labels={"kind": f"k{i % 20}"}, dataset="", gpus=8,
                        flavors=("a100-80g",))
            for i in range(PENDING)
        ]
        now = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
        clusters = ["c0", "c1", "c2", "c3"]

        def cycle_ctx() -> CycleContext:
            c = CycleContext(now=now, queue_paths=paths, clusters=clusters, pending=pending)
            c.quota_max.update({(p, "a100-80g/gpu"): 256.0 for p in paths})
            return c

        cspecs = active_specs(CYCLE_KINDS)
        whole = timed(lambda: policy_cycle_adjuster(cycle_ctx()), CYCLES)
        whole_cpu = timed(lambda: policy_cycle_adjuster(cycle_ctx()), CYCLES,
                          clock=time.process_time)
        evaluation = timed(lambda: cycle_evaluate(
            cspecs, now=now, queue_paths=paths, clusters=clusters, pending=pending), CYCLES)
        probe = cycle_ctx()
        policy_cycle_adjuster(probe)
        capped = sum(1 for v in probe.max_policy.values() if v)
        placed = len(probe.allowed_clusters)
        print(f"CYCLE COST, {len(paths)} queues, {PENDING} pending, 10 limit + 10 placement "
              f"policies ({capped} queue keys capped, {placed} workloads placed), "
              f"{CYCLES} runs:")
        print(f"  evaluate over DB state:   median {statistics.median(evaluation):.1f} ms")
        print(f"  whole adjuster:           median {statistics.median(whole):.1f} ms, "
              f"max {max(whole):.1f} ms (the first run records the caps as violations)")
        print(f"  whole adjuster, CPU time: median {statistics.median(whole_cpu):.1f} ms")
    finally:
        from policies.services import policy_counts_flush

        policy_counts_flush()  # the buffered hit counts, before the database goes
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
