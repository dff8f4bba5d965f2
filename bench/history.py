"""Write cost of the change history: `python -m bench.history`.

Times typical edits with the history on and off (simple-history's SIMPLE_HISTORY_ENABLED,
read at every save, so the same process, database and data run both ways, alternated):

1. a quota entry saved (`QuotaEntry.save()`: one UPDATE, plus one INSERT with history), and
   the same change through the tree service (`quota_set`: the whole tree validated first);
2. a queue saved (`Queue.save()`), and a description change through `queue_update`;
3. a tree import of N queues whose every quota changes (`tree_replace`, the write half of
   `import_quotas`: N queue saves, N entry saves, so 2N history rows).

Wall time: the median (and the least, the figure least touched by other work on a shared
machine) over ROUNDS rounds of the mean of one batch. CPU time: this process's and its
PostgreSQL backend's (from /proc), summed over the rounds, per operation: on a machine shared
with other jobs it moves far less than the wall time. Runs on a throwaway
PostgreSQL database on DATABASE_URL's server (production's engine; `make run`'s SQLite is
not what the figures are for).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
# Its own throwaway database: never the one a test run (TEST_DATABASE_NAME) is using.
os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_HISTORY_DB", "test_allot_bench_history")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

settings.DEBUG = False  # DEBUG logs every query: measure without that, as in production

DEPARTMENTS, TEAMS = 10, 20  # 10 + 200 = 210 queues
ROUNDS = int(os.environ.get("BENCH_HISTORY_ROUNDS", "9"))
BATCH = 50  # single edits per round and mode
IMPORT_QUEUES = int(os.environ.get("BENCH_HISTORY_IMPORT", "200"))


def build_tree() -> dict[str, Any]:
    from quotas.models import Flavor, Queue
    from quotas.services import QueueDef, tree_replace
    from quotas.tree_rules import QuotaSpec

    Flavor.objects.create(name="a100-80g", gpu_memory_gib=80)
    key = ("a100-80g", "gpu")
    defs = []
    for d in range(DEPARTMENTS):
        defs.append(QueueDef(path=f"d{d}", quota={key: QuotaSpec(Decimal(400), Decimal(800))}))
        for t in range(TEAMS):
            defs.append(QueueDef(path=f"d{d}/t{t}",
                                 quota={key: QuotaSpec(Decimal(10), Decimal(40))}))
    tree_replace(queues=defs)
    return {"leaves": list(Queue.objects.filter(depth=2).order_by("path")), "key": key}


def history_rows() -> int:
    from quotas.models import Queue, QuotaEntry

    return Queue.history.count() + QuotaEntry.history.count()


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


def measure(name: str, batch: Callable[[int], int], rounds: int = ROUNDS) -> dict[str, Any]:
    """Run `batch(i)` (it returns how many operations it made) with the history on and off,
    alternating which goes first; ms per operation."""
    per_op: dict[bool, list[float]] = {True: [], False: []}
    rows: dict[bool, int] = {True: 0, False: 0}
    cpu: dict[bool, list[float]] = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}
    for r in range(rounds):
        for enabled in ((True, False) if r % 2 == 0 else (False, True)):
            settings.SIMPLE_HISTORY_ENABLED = enabled
            before = history_rows()
            db0, py0 = backend_cpu_s(), time.process_time()
            start = time.perf_counter()
            ops = batch(2 * r + enabled)
            per_op[enabled].append((time.perf_counter() - start) * 1000 / ops)
            py1, db1 = time.process_time(), backend_cpu_s()
            cpu[enabled][0] += py1 - py0
            cpu[enabled][1] += db1 - db0
            cpu[enabled][2] += ops
            rows[enabled] += history_rows() - before
    settings.SIMPLE_HISTORY_ENABLED = True
    on, off = statistics.median(per_op[True]), statistics.median(per_op[False])
    low_on, low_off = min(per_op[True]), min(per_op[False])
    py = {k: v[0] * 1000 / v[2] for k, v in cpu.items()}
    db = {k: v[1] * 1000 / v[2] for k, v in cpu.items()}
    print(f"{name}: {rows[True]} history rows written with it on, {rows[False]} off")
    print(f"  wall  off {off:8.3f} (least {low_off:.3f}) ms   on {on:8.3f} (least {low_on:.3f}) ms"
          f"   {on - off:+.3f} ms ({(on / off - 1) * 100:+.1f}%)")
    print(f"  CPU   off {py[False] + db[False]:8.3f} ms (Python {py[False]:.3f} + PostgreSQL "
          f"{db[False]:.3f})   on {py[True] + db[True]:8.3f} ms (Python {py[True]:.3f} + "
          f"PostgreSQL {db[True]:.3f})   {py[True] + db[True] - py[False] - db[False]:+.3f} ms")
    return {"name": name, "off": off, "on": on}


def main() -> None:
    from quotas.models import QuotaEntry
    from quotas.services import QueueDef, queue_update, quota_set, tree_replace
    from quotas.tree_rules import QuotaSpec

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start; database: "
          f"{connection.vendor}; {ROUNDS} rounds, history on and off alternated")
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        tree = build_tree()
        leaves, key = tree["leaves"], tree["key"]
        entries = list(QuotaEntry.objects.filter(queue__in=leaves).select_related("queue"))

        def entry_saves(i: int) -> int:
            for n, entry in enumerate(entries[:BATCH]):
                entry.min = Decimal(5 + (i + n) % 5)
                entry.save()
            return BATCH

        def queue_saves(i: int) -> int:
            for n, queue in enumerate(leaves[:BATCH]):
                queue.description = f"round {i} queue {n}"
                queue.save()
            return BATCH

        def quota_sets(i: int) -> int:
            for n, queue in enumerate(leaves[:10]):
                quota_set(queue=queue, flavor=key[0], resource=key[1],
                          min=Decimal(5 + (i + n) % 5), max=Decimal(40))
            return 10

        def queue_updates(i: int) -> int:
            for n, queue in enumerate(leaves[:10]):
                queue_update(queue=queue, description=f"update {i} {n}")
            return 10

        def tree_import(i: int) -> int:
            defs = [QueueDef(path=q.path, description=f"import {i}",
                             quota={key: QuotaSpec(Decimal(1 + (i % 9)), Decimal(40))})
                    for q in leaves[:IMPORT_QUEUES]]
            tree_replace(queues=defs)
            return 1

        print("per operation; wall: median (least) of the rounds' means; CPU: over all rounds")
        measure("QuotaEntry.save() (one entry)", entry_saves)
        measure("Queue.save() (one queue)", queue_saves)
        measure("quota_set (service: whole tree checked)", quota_sets)
        measure("queue_update (service: a description)", queue_updates)
        measure(f"tree import of {min(IMPORT_QUEUES, len(leaves))} queues (tree_replace)",
                tree_import)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size('quotas_historicalquotaentry'),"
                           " (SELECT COUNT(*) FROM quotas_historicalquotaentry)")
            size, count = cursor.fetchone()
        print(f"storage: quotas_historicalquotaentry {count} rows, {size / 1024:.0f} KiB with "
              f"its indexes ({size / max(count, 1):.0f} bytes per row)")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
