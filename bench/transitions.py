"""Cost of the transitions trigger (migration 0007): `python -m bench.transitions`.

Moves WORKLOADS workloads between pending and reserved (both ways allowed) with the trigger
on and off (PostgreSQL: ALTER TABLE ... DISABLE TRIGGER; SQLite: the trigger dropped and
created again), alternated round by round on the same rows:

1. `workloads_move`: one conditional UPDATE of every row (the workers' bulk moves);
2. `core.db.bulk_set` of the state columns (the cycle's writes): on PostgreSQL one UPDATE per
   row, pipelined; on SQLite Django's bulk_update.

Each round moves every row there and back (two statements of WORKLOADS rows) in one
transaction, after a VACUUM on PostgreSQL (so no round pays for the dead rows of the others).
Wall time (median, least) and CPU time (median; this process's and its PostgreSQL backend's,
from /proc: on a machine shared with other work it moves far less than the wall time) over
ROUNDS rounds. Runs on a throwaway database on
DATABASE_URL's server (PostgreSQL by default; DATABASE_URL=sqlite:///... for `make run`'s).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
# Its own throwaway database: never the one a test run (TEST_DATABASE_NAME) is using.
os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_TRANSITIONS_DB",
                                                  "test_allot_bench_transitions")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402

settings.DEBUG = False  # DEBUG logs every query: measure without that, as in production

WORKLOADS = int(os.environ.get("BENCH_TRANSITIONS_WORKLOADS", "10000"))
ROUNDS = int(os.environ.get("BENCH_TRANSITIONS_ROUNDS", "6"))
TRIGGER = "scheduling_workload_state_allowed"


def build() -> list[int]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from quotas.models import Queue
    from scheduling.models import PriorityClass, Workload

    user = get_user_model().objects.create_user("bench", password="x")
    queue = Queue.objects.create(name="bench")
    klass, _ = PriorityClass.objects.get_or_create(name="training", defaults={"value": 1000})
    now = timezone.now()
    Workload.objects.bulk_create([
        Workload(name=f"w{i}", queue=queue, owner=user, priority_class=klass, state="pending",
                 submitted_at=now - timedelta(seconds=i), state_changed_at=now)
        for i in range(WORKLOADS)], batch_size=2000)
    return list(Workload.objects.order_by("pk").values_list("pk", flat=True))


class Switch:
    """Turns the trigger off and on again."""

    def __init__(self) -> None:
        self.sql = ""
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND "
                               "name = %s", [TRIGGER])
                self.sql = cursor.fetchone()[0]

    def set(self, on: bool) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                verb = "ENABLE" if on else "DISABLE"
                cursor.execute(f"ALTER TABLE scheduling_workload {verb} TRIGGER {TRIGGER}")
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
                if on:
                    cursor.execute(self.sql)


def by_move(ids: list[int]) -> None:
    from django.utils import timezone

    from scheduling.transitions import workloads_move

    now = timezone.now()
    assert len(workloads_move(ids, "pending", "reserved", at=now)) == len(ids)
    assert len(workloads_move(ids, "reserved", "pending", at=now)) == len(ids)


def by_bulk_set(ids: list[int]) -> None:
    from django.utils import timezone

    from core import db
    from scheduling.models import Workload

    now = timezone.now()
    rows = [Workload(pk=pk, state="reserved", state_changed_at=now) for pk in ids]
    db.bulk_set(Workload, rows, ["state", "state_changed_at"])
    for w in rows:
        w.state = "pending"
    db.bulk_set(Workload, rows, ["state", "state_changed_at"])


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s() -> float:
    """CPU seconds used so far by this process and, on PostgreSQL, its backend (from /proc;
    on a machine shared with other work the wall time moves far more than this)."""
    own = time.process_time()
    if connection.vendor != "postgresql":
        return own  # SQLite runs in this process
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:  # a database on another machine: no figure
        return float("nan")
    return own + (int(fields[11]) + int(fields[12])) / _TICK


def rounds(fn: Callable[[list[int]], None], ids: list[int], switch: Switch
           ) -> dict[bool, tuple[list[float], list[float]]]:
    """(wall ms, CPU ms) of each round, trigger on and off, alternating which goes first."""
    out: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
    for n in range(ROUNDS):
        for on in (True, False) if n % 2 == 0 else (False, True):
            switch.set(on)
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:  # every round on an unbloated table
                    cursor.execute("VACUUM scheduling_workload")
            cpu, start = cpu_s(), time.perf_counter()
            with transaction.atomic():
                fn(ids)
            out[on][0].append((time.perf_counter() - start) * 1000)
            out[on][1].append((cpu_s() - cpu) * 1000)
    switch.set(True)
    return out


def report(name: str, times: dict[bool, tuple[list[float], list[float]]]) -> None:
    print(f"{name}:")
    rows = 2 * WORKLOADS
    for on in (True, False):
        wall, cpu = times[on]
        print(f"  trigger {'on ' if on else 'off'}: wall median {statistics.median(wall):7.1f} "
              f"ms, least {min(wall):7.1f} ms; CPU median {statistics.median(cpu):7.1f} ms "
              f"({statistics.median(cpu) * 1000 / rows:.1f} us per row moved)")
    for what, i in (("wall", 0), ("CPU", 1)):
        on, off = statistics.median(times[True][i]), statistics.median(times[False][i])
        print(f"  trigger cost ({what}, medians): {on - off:+.1f} ms per {rows} rows moved "
              f"({(on - off) * 1000 / rows:+.1f} us per row, {on / off - 1:+.0%})")


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start; database: "
          f"{connection.vendor}; {WORKLOADS} workloads moved pending -> reserved -> pending, "
          f"{ROUNDS} rounds each way")
    old_name: Any = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        ids = build()
        switch = Switch()
        by_move(ids)  # warm: caches, the trigger function's plan
        report("workloads_move (one UPDATE of every row, each way)",
               rounds(by_move, ids, switch))
        report("core.db.bulk_set (the cycle's writes)",
               rounds(by_bulk_set, ids, switch))
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
