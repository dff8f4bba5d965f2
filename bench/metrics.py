"""The cost of `/metrics`: `python -m bench.metrics`.

On a throwaway PostgreSQL database (DATABASE_URL's server; BENCH_METRICS_DB names it, default
`test_allot_bench_metrics`) holding 1,000 queues (20 departments of 49 teams, a GPU quota on
two flavors each), 3 clusters of 50 nodes (1,200 GPUs), 4,900 pending workloads, the admitted
ones, HISTORY finished workloads over 30 days (their admissions, admitted, reason and finish
events, one in ten preempted once), 2,000 admissions in the last ten minutes, 50 cost centers
with budgets and LEDGER ledger entries this month:

1. Scrape time (`/metrics`' whole text, in-process, DEBUG off): the first scrape (it folds the
   whole event history into the running totals once), the first with the spend sums not
   cached, then the median and p95 of ROUNDS scrapes, with the exposition's size and queries.
2. What `/metrics` adds to a scheduling cycle: the gauges are read at scrape time, so the
   cycle records only three things: the engine's blocked leaves (`violating_leaves`, after
   the cycle), them in the cycle mark's UPDATE (after the cycle's transaction, as before),
   and its duration in the histogram (one INSERT ... ON CONFLICT in the cycle's
   transaction). Each is timed alone against what the cycle did before (the mark's UPDATE
   without the leaves, no histogram), alternated, and set against the median cycle on this
   database; then whole cycles with and without the recording, alternated (the difference
   is within their noise).

BENCH_METRICS_PARTS (`scrape`, `cycle` or both, the default), BENCH_METRICS_ROUNDS (30),
BENCH_METRICS_HISTORY and BENCH_METRICS_LEDGER (the sizes above), BENCH_KEEP=1 (keep the
database) and BENCH_REUSE=1 (measure a kept one again without seeding it; its first scrape
then folds nothing).

Wall times are medians; CPU time (this process and its PostgreSQL backend, from /proc) is
printed beside the scrape figures, as a machine shared with other jobs moves it far less.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
# Its own throwaway database: never the one a test run (TEST_DATABASE_NAME) is using.
os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_METRICS_DB",
                                                  "test_allot_bench_metrics")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

settings.DEBUG = False  # DEBUG logs every query: measure without that, as in production

DEPARTMENTS, TEAMS = 20, 49  # 20 + 980 = 1,000 queues
PENDING_PER_LEAF = 5
HISTORY = int(os.environ.get("BENCH_METRICS_HISTORY", "100000"))
LEDGER = int(os.environ.get("BENCH_METRICS_LEDGER", "200000"))
RECENT = 2000  # admissions in the last ten minutes (counted from the index at each scrape)
ROUNDS = int(os.environ.get("BENCH_METRICS_ROUNDS", "30"))
PARTS = set(os.environ.get("BENCH_METRICS_PARTS", "scrape,cycle").split(","))
KEEP = os.environ.get("BENCH_KEEP", "") == "1"  # keep the database afterwards
REUSE = os.environ.get("BENCH_REUSE", "") == "1"  # measure a kept database again, unseeded
_TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu_s() -> float:
    """User + system CPU seconds this connection's PostgreSQL backend has used so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:  # a database on another machine: no figure
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _TICK


def seed() -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from billing.models import (
        Budget,
        BudgetThreshold,
        ChargeBasis,
        ChargeKind,
        CostCenter,
        LedgerEntry,
        LedgerHead,
    )
    from billing.services import rate_card_create
    from quotas.models import Flavor, Queue, QuotaEntry
    from scheduling.models import (
        Admission,
        Cluster,
        Node,
        PodSet,
        PriorityClass,
        Workload,
        WorkloadEvent,
    )

    rnd = random.Random(7)
    now = timezone.now()
    flavors = [Flavor.objects.create(name=n, gpu_memory_gib=80) for n in ("a100-80g", "h100-80g")]
    clusters = [Cluster.objects.create(name=c, region=c) for c in ("bj", "sh", "gz")]
    Node.objects.bulk_create([
        Node(cluster=c, name=f"{c.name}-n{i:03d}", flavor=flavors[i % 2], gpus=8,
             cpu=Decimal(96), memory_gib=Decimal(1024), rack=f"r{i // 10}")
        for c in clusters for i in range(50)])
    leaves: list[Queue] = []
    entries = []
    for d in range(DEPARTMENTS):
        dept = Queue(name=f"d{d}")
        dept.save()
        for f in flavors:
            entries.append(QuotaEntry(queue=dept, flavor=f, min=Decimal(30), max=Decimal(300)))
        for t in range(TEAMS):
            leaf = Queue(name=f"t{t}", parent=dept, namespace=f"d{d}-t{t}")
            leaf.save()
            leaves.append(leaf)
            for f in flavors:
                entries.append(QuotaEntry(queue=leaf, flavor=f, min=Decimal(0), max=Decimal(16)))
    QuotaEntry.objects.bulk_create(entries)
    assert Queue.objects.count() == 1000
    user = get_user_model().objects.create_user("bench", password="bench-pass-1")
    training, _ = PriorityClass.objects.get_or_create(name="training",
                                                      defaults={"value": 1000})

    # Pending work in every leaf, and the history: finished workloads with their events.
    pending = []
    for leaf in leaves:
        for i in range(PENDING_PER_LEAF):
            submitted = now - timedelta(minutes=rnd.randrange(1, 600))
            pending.append(Workload(name=f"p{i}", queue=leaf, owner=user,
                                    priority_class=training, submitted_at=submitted,
                                    state_changed_at=submitted, duration_hint_s=3600))
    Workload.objects.bulk_create(pending, batch_size=5000)
    PodSet.objects.bulk_create([
        PodSet(workload=w, index=0, count=1, flavors=[flavors[w.pk % 2].name],
               gpus=rnd.choice((1, 2, 4, 8)), cpu=Decimal(8), memory_gib=Decimal(64))
        for w in Workload.objects.filter(state="pending")], batch_size=5000)
    history = []
    for i in range(HISTORY):
        submitted = now - timedelta(minutes=rnd.randrange(30, 60 * 24 * 30))
        history.append(Workload(
            name=f"h{i}", queue=leaves[i % len(leaves)], owner=user, priority_class=training,
            state="finished", submitted_at=submitted, state_changed_at=submitted,
            finished_at=submitted + timedelta(hours=2)))
    Workload.objects.bulk_create(history, batch_size=5000)
    admissions, events = [], []
    for w in Workload.objects.filter(state="finished").only("pk", "submitted_at", "queue_id"):
        admitted = w.submitted_at + timedelta(seconds=rnd.randrange(1, 3600))
        admissions.append(Admission(
            workload=w, cluster=clusters[w.pk % 3], flavor=flavors[w.pk % 2], nodes=["n"],
            gpus=8, reserved_at=admitted, running_at=admitted, ended_at=admitted
            + timedelta(hours=1), end_reason="finished"))
        events += [WorkloadEvent(workload=w, at=w.submitted_at, type="submitted"),
                   WorkloadEvent(workload=w, at=w.submitted_at, type="reason",
                                 code="NO_CAPACITY"),
                   WorkloadEvent(workload=w, at=admitted, type="admitted"),
                   WorkloadEvent(workload=w, at=admitted + timedelta(hours=1),
                                 type="finished")]
        if w.pk % 10 == 0:
            events.append(WorkloadEvent(workload=w, at=admitted + timedelta(minutes=30),
                                        type="preempted", code="QUOTA_BORROW_UNAVAILABLE",
                                        payload={"kind": "reclaim", "by": w.pk - 1}))
    Admission.objects.bulk_create(admissions, batch_size=5000)
    recent = rnd.sample(range(len(admissions)), RECENT)
    events += [WorkloadEvent(workload_id=admissions[i].workload_id,
                             at=now - timedelta(seconds=rnd.randrange(1, 590)), type="admitted")
               for i in recent]
    WorkloadEvent.objects.bulk_create(events, batch_size=10000)

    # Billing: 50 cost centers with budgets, a month of ledger.
    centers = CostCenter.objects.bulk_create([
        CostCenter(code=f"cc{i}", name=f"Cost center {i}") for i in range(50)])
    card = rate_card_create(flavor=flavors[0], resource="gpu", rate=Decimal("2.50"),
                            effective_from=now - timedelta(days=60))
    budgets = Budget.objects.bulk_create([Budget(cost_center=c, amount=Decimal(100000))
                                          for c in centers])
    BudgetThreshold.objects.bulk_create([BudgetThreshold(budget=b, percent=p, action="notify")
                                         for b in budgets for p in (50, 80)])
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    hours = max(1, int((now - month_start).total_seconds() // 3600))
    LedgerEntry.objects.bulk_create([
        LedgerEntry(seq=i + 1, created_at=now,
                    hour=month_start + timedelta(hours=i % hours), cost_center=centers[i % 50],
                    queue="d0/t0", flavor="a100-80g", kind=ChargeKind.GPU_RESERVED,
                    basis=ChargeBasis.ALLOCATION, quantity=Decimal(8), unit="gpu_hour",
                    rate_card=card, rate_version=1, rate=Decimal("2.50"),
                    amount=Decimal("20.00"), currency="EUR", prev_hash="0" * 64,
                    hash="0" * 64)
        for i in range(LEDGER)], batch_size=10000)
    LedgerHead.objects.update_or_create(pk=1, defaults={"last_seq": LEDGER})
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # as autovacuum would have by then
    return {"events": len(events)}


def timed(fn: Callable[[], Any]) -> tuple[float, float, float]:
    """Wall, process CPU and backend CPU seconds of one call."""
    db0, py0, t0 = backend_cpu_s(), time.process_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall, time.process_time() - py0, backend_cpu_s() - db0


def bench_scrape() -> None:
    from django.core.cache import cache
    from prometheus_client import generate_latest

    from portal.monitoring import REGISTRY, exposition, metrics_text

    first = timed(metrics_text)
    print(f"first scrape (folds the whole history once): {first[0] * 1000:.0f} ms wall, "
          f"{first[1] * 1000:.0f} ms CPU here, {first[2] * 1000:.0f} ms in PostgreSQL")
    cache.clear()
    cold = timed(metrics_text)
    print(f"scrape with the spend sums not cached: {cold[0] * 1000:.0f} ms wall, "
          f"{cold[1] * 1000:.0f} ms CPU here, {cold[2] * 1000:.0f} ms in PostgreSQL")
    runs = [timed(metrics_text) for _ in range(ROUNDS)]
    walls = sorted(r[0] * 1000 for r in runs)
    with CaptureQueriesContext(connection) as queries:
        text = metrics_text()
    lines = [line for line in text.decode().splitlines() if line and line[0] != "#"]
    families = list(REGISTRY.collect())
    ours = statistics.median(timed(lambda: exposition(families))[0] for _ in range(5))
    theirs = statistics.median(timed(lambda: generate_latest(REGISTRY))[0] for _ in range(3))
    print(f"the text of {len(lines):,} samples: {ours * 1000:.0f} ms (portal.monitoring."
          f"exposition); prometheus_client's generate_latest, collecting too: "
          f"{theirs * 1000:.0f} ms")
    print(f"steady scrape over {ROUNDS}: median {statistics.median(walls):.0f} ms, "
          f"p95 {walls[int(0.95 * (len(walls) - 1))]:.0f} ms wall; per scrape "
          f"{sum(r[1] for r in runs) / ROUNDS * 1000:.0f} ms CPU here, "
          f"{sum(r[2] for r in runs) / ROUNDS * 1000:.0f} ms in PostgreSQL; "
          f"{len(queries)} queries, {len(lines):,} samples, {len(text) / 1024:.0f} KiB")


def bench_cycle() -> None:
    from django.db import transaction

    import scheduling.workers.cycle as cycle_module
    from scheduling import tallies
    from scheduling.engine.engine import Engine
    from scheduling.models import CycleMark
    from scheduling.pacing import cycle_mark
    from scheduling.workers.cycle import cycle_run
    from scheduling.workers.snapshot import build_snapshot

    for _ in range(3):  # admit what fits; then the cycles re-decide a full fleet
        cycle_run(wait=True)

    def old_mark(seconds: float) -> None:
        CycleMark.objects.filter(pk=1).update(ended_at=timezone.now(), seconds=seconds)

    def observe_in_a_transaction() -> None:  # as the cycle does: among its own writes
        with transaction.atomic():
            for _ in range(100):
                tallies.cycle_observe(0.2)

    blocked = ["d0/t0", "d3/t17"]  # a mark with leaves, as on a bad day
    runs: dict[str, list[float]] = {"mark before": [], "mark now": [],
                                    "mark, two leaves": [], "histogram": []}
    for i in range(ROUNDS * 10):
        order = [
            ("mark before", lambda: old_mark(0.2)),
            ("mark now", lambda: cycle_mark(ended_at=timezone.now(), seconds=0.2)),
            ("mark, two leaves", lambda: cycle_mark(ended_at=timezone.now(), seconds=0.2,
                                                    guarantee_blocked=blocked)),
            ("histogram", observe_in_a_transaction)]
        for name, fn in order if i % 2 else reversed(order):
            t0 = time.perf_counter()
            fn()
            runs[name].append((time.perf_counter() - t0) * 1000)
    histogram_ms = statistics.median(runs["histogram"]) / 100
    snapshot, _ = build_snapshot(timezone.now())
    eng = Engine.from_snapshot(snapshot)
    eng.cycle(snapshot.now)
    leaves_ms = []
    for _ in range(ROUNDS * 50):
        t0 = time.perf_counter()
        eng.violating_leaves()
        leaves_ms.append((time.perf_counter() - t0) * 1000)

    plain_schedule, plain_observe = cycle_module.schedule, tallies.cycle_observe

    def schedule_before(snap: Any) -> Any:  # the entry point as it was: no blocked leaves
        return Engine.from_snapshot(snap).cycle(snap.now)

    cycles: dict[str, list[float]] = {"without": [], "with": []}
    for i in range(ROUNDS):
        for recording in ((True, False) if i % 2 else (False, True)):
            cycle_module.schedule = plain_schedule if recording else schedule_before
            tallies.cycle_observe = plain_observe if recording else (  # type: ignore[assignment]
                lambda seconds: None)
            t0 = time.perf_counter()
            report = cycle_run(wait=True)
            if recording:
                cycle_mark(ended_at=timezone.now(), seconds=report.seconds,
                           guarantee_blocked=report.guarantee_blocked)
            else:
                old_mark(report.seconds)
            cycles["with" if recording else "without"].append(
                (time.perf_counter() - t0) * 1000)
    cycle_module.schedule, tallies.cycle_observe = plain_schedule, plain_observe
    cycle_ms = statistics.median(cycles["without"])
    before, after = (statistics.median(runs[k]) for k in ("mark before", "mark now"))
    added = max(0.0, after - before) + histogram_ms + statistics.median(leaves_ms)
    print(f"\ncycle on this database (4,900 pending, fleet full): median {cycle_ms:.0f} ms")
    print(f"the cycle mark's UPDATE (after the cycle): {before:.2f} ms before, {after:.2f} ms "
          f"with the blocked leaves' column, {statistics.median(runs['mark, two leaves']):.2f} "
          f"ms with two leaves in it")
    print(f"the histogram's upsert, in the cycle's transaction: {histogram_ms:.3f} ms")
    print(f"the engine's violating_leaves after the cycle: {statistics.median(leaves_ms):.3f} ms")
    print(f"added per cycle: {added:.2f} ms = {added / cycle_ms * 100:.2f}% of this cycle")
    print(f"whole cycles (with the mark), alternated, over {ROUNDS}: without the recording "
          f"{cycle_ms:.0f} ms, with it {statistics.median(cycles['with']):.0f} ms (median)")


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start; database: "
          f"{connection.vendor}")
    if connection.vendor != "postgresql":
        raise SystemExit("bench.metrics needs PostgreSQL: set DATABASE_URL=postgres://...")
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=not REUSE, serialize=False,
                                       keepdb=REUSE)
    try:
        if REUSE:
            print(f"reusing the kept database {connection.settings_dict['NAME']}\n")
        else:
            t0 = time.perf_counter()
            seeded = seed()
            print(f"seeded 1,000 queues, 1,200 GPUs, {DEPARTMENTS * TEAMS * PENDING_PER_LEAF:,} "
                  f"pending and {HISTORY:,} finished workloads ({seeded['events']:,} events), "
                  f"{LEDGER:,} ledger entries in {time.perf_counter() - t0:.0f} s\n")
        if "scrape" in PARTS:
            bench_scrape()
        if "cycle" in PARTS:
            bench_cycle()
    finally:
        if KEEP:
            print(f"kept database {connection.settings_dict['NAME']}")
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
