"""What-if figures: a 24 h what-if on the demo fleet (`python -m bench.whatif`).

On a PostgreSQL database of its own (BENCH_DB, default `allot_whatif_bench`, created and
dropped here; server BENCH_PG, default postgres://postgres@127.0.0.1:5432): the demo
organisation (`seed_demo`: 3 clusters, A100, H100, V100 and CPU nodes, its demo workloads),
then BENCH_WORKLOADS (default 1,000) more requests submitted over the last 24 hours to the
demo's leaf queues (1-8 GPUs, hints of 10 min to 4 h for half of them), and a cycle so that
what fits runs. Then a 24 h what-if (a department's min on the A100s halved, and 4 more A100
nodes) is timed: the scenario built from the database, then both replays (as it stands, with
the change). Prints the figures and one line of JSON (`{"bench": "whatif", ...}`).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import sys
import time
from datetime import timedelta

import psycopg

BENCH_DB = os.environ.get("BENCH_DB", "allot_whatif_bench")
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
WORKLOADS = int(os.environ.get("BENCH_WORKLOADS", "1000"))
os.environ.update({"DATABASE_URL": f"{PG}/{BENCH_DB}", "DEBUG": "false",
                   "SECRET_KEY": secrets.token_urlsafe(40), "LOG_LEVEL": "WARNING",
                   "CELERY_TASK_ALWAYS_EAGER": "false"})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")


def _admin_sql(sql: str) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def main() -> int:
    _admin_sql(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    _admin_sql(f"CREATE DATABASE {BENCH_DB}")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections
        from django.utils import timezone

        from portal.demo import seed_demo
        from quotas.models import Queue
        from scheduling.demo import _submitter
        from scheduling.models import WhatIf, Workload
        from scheduling.services import workload_submit
        from scheduling.whatif.services import what_if_run, what_if_start
        from scheduling.workers.cycle import cycle_run

        call_command("migrate", verbosity=0)
        seed_demo()
        rng = random.Random(11)
        leaves = list(Queue.objects.filter(children__isnull=True).order_by("path"))
        users = {q.pk: _submitter(q) for q in leaves}
        now = timezone.now()
        for i in range(WORKLOADS):
            q = rng.choice(leaves)
            user = users[q.pk]
            gpus = rng.choice((1, 2, 4, 8))
            at = now - timedelta(seconds=rng.uniform(0, 86_400))
            data = {"name": f"b{i}", "queue": q.path, "priority_class": "training",
                    "pods": [{"count": 1, "flavors": ["a100-80g", "h100-80g"], "gpus": gpus,
                              "cpu": 4, "memory_gib": 32}]}
            if rng.random() < 0.5:
                data["duration_hint_s"] = int(rng.uniform(600, 14_400))
            workload_submit(user=user, data=data, now=at, nudge=False)
        cycle_run(wait=True)
        admin = get_admin()
        dept = Queue.objects.filter(parent__isnull=True).order_by("path").first()
        assert dept is not None
        t0 = time.perf_counter()
        run = what_if_start(user=admin, data={"hours": 24, "changes": {
            "add_nodes": [{"cluster": "bench-extra", "flavor": "a100-80g", "count": 4,
                           "gpus": 8}]}})
        build_s = time.perf_counter() - t0
        t1, c1 = time.perf_counter(), time.process_time()
        what_if_run(what_if_id=run.pk)
        replay_s, cpu_s = time.perf_counter() - t1, time.process_time() - c1
        run = WhatIf.objects.get(pk=run.pk)
        res = run.result or {}
        figures = {
            "bench": "whatif", "hours": 24,
            "workloads_in_scenario": len(run.scenario["workloads"]),
            "pending_now": Workload.objects.filter(state="pending").count(),
            "build_s": round(build_s, 2), "replays_wall_s": round(replay_s, 2),
            "replays_cpu_s": round(cpu_s, 2), "state": run.state,
            "baseline_p95_wait_s": res.get("baseline", {}).get("p95_wait_s"),
            "changed_p95_wait_s": res.get("changed", {}).get("p95_wait_s"),
        }
        print(f"[whatif] demo fleet + {WORKLOADS} submissions over the last 24 h: "
              f"{figures['workloads_in_scenario']} workloads in the 24 h scenario")
        print(f"[whatif] scenario from the database {build_s:.2f} s; both replays "
              f"{replay_s:.2f} s wall, {cpu_s:.2f} s CPU ({run.state})")
        print(f"[whatif] p95 wait as it stands {figures['baseline_p95_wait_s']} s, with 4 more "
              f"A100 nodes {figures['changed_p95_wait_s']} s")
        print(json.dumps(figures))
        connections.close_all()
    finally:
        _admin_sql(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    return 0


def get_admin():  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(is_superuser=True).first()


if __name__ == "__main__":
    sys.exit(main())
