"""Portal figures: `python -m bench.portal`.

On a PostgreSQL database of its own (`allot_bench`, created and dropped here) holding 200
queues, 3 clusters (150 nodes, 1,200 GPUs), 20,000 workloads and 200,000 events:

1. p50 and p95 server time of every page and list endpoint (target p95 < 150 ms), measured
   in-process through Django's test client with DEBUG off, as a researcher and as an admin.
2. Requests per second and p50/p95/p99 latency of `POST /api/v1/workloads` against gunicorn
   on 127.0.0.1:8701 (`bench/load.py`): 20 clients with no workers (target > 300/s on a 2-core
   machine), then 20 and 200 clients with a Celery worker and its beat scheduling on the same
   database, as in production (target at 200: > 200/s, p99 < 1 s).

Environment: BENCH_PG (server URL, default postgres://postgres@127.0.0.1:5432),
BENCH_REDIS (broker for the submit nudges, default redis://127.0.0.1:6379/3, flushed after),
BENCH_SECONDS (each load's duration, default 15), BENCH_LOADS (the loads, as
`clients:workers` pairs, default `20:0,20:1,200:1`), BENCH_GUNICORN (gunicorn worker options,
default `-w 2 --threads 4` with gunicorn.conf.py's worker class: two processes for two
cores, four threads each; ten threads each cost 5-15% more CPU per request in lock
contention, for no more throughput; `-k gthread` for gunicorn's stock threaded worker),
BENCH_CLIENT (the load generator: `wrk`, the default where Debian's wrk is installed, or
`python`: a thread per client in the bench's process), BENCH_PARTS (`pages`, `post` or both,
the default: `pages,post`), BENCH_URLS (measure only
the pages whose URL contains one of these comma-separated parts, e.g.
`/dashboard/,/queues/q/,/api/v1/queues`; default: all), BENCH_DB (database name, default
`allot_bench`, so two runs need not share one), BENCH_KEEP=1 (keep the database afterwards)
and BENCH_REUSE=1 (measure a kept database again without seeding it anew).
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psycopg

from bench.load import load_test, report

BENCH_DB = os.environ.get("BENCH_DB", "allot_bench")
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/3")
SECONDS = float(os.environ.get("BENCH_SECONDS", "15"))
# Gunicorn's worker options (the figure is printed with them).
GUNICORN = os.environ.get("BENCH_GUNICORN", "-w 2 --threads 4")
PARTS = set(os.environ.get("BENCH_PARTS", "pages,post").split(","))
URL_FILTER = [u for u in os.environ.get("BENCH_URLS", "").split(",") if u]
KEEP = os.environ.get("BENCH_KEEP", "") == "1"
REUSE = os.environ.get("BENCH_REUSE", "") == "1"
PORT = 8701
CLIENTS = 20  # tokens (users); more clients share them round robin
LOADS = [tuple(int(x) for x in pair.split(":"))
         for pair in os.environ.get("BENCH_LOADS", "20:0,20:1,200:1").split(",")]
ROOT = Path(__file__).resolve().parent.parent
# The load generator: wrk (Debian's package) where installed, else Python threads.
CLIENT = os.environ.get("BENCH_CLIENT") or ("wrk" if shutil.which("wrk") else "python")

ENV = {
    "DATABASE_URL": f"{PG}/{BENCH_DB}",
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(40),
    "CELERY_BROKER_URL": REDIS,
    "CONN_MAX_AGE": "60",
    "LOG_LEVEL": "WARNING",
}
os.environ.update(ENV)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")


def _admin_sql(sql: str) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(sql)


def create_db() -> None:
    _admin_sql(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    _admin_sql(f"CREATE DATABASE {BENCH_DB}")


def drop_db() -> None:
    from django.db import connections

    connections.close_all()
    _admin_sql(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def seed() -> dict:
    """The organisation: returns handles the measurements need."""
    from django.contrib.auth import get_user_model

    from quotas.capacity.models import CapacityRequest
    from quotas.models import Flavor, Queue, QuotaEntry, Team, TeamMembership, TeamRole
    from scheduling.models import (
        Admission,
        Cluster,
        Node,
        PodSet,
        PriorityClass,
        Workload,
        WorkloadEvent,
    )

    rnd = random.Random(5)
    User = get_user_model()
    flavors = [Flavor.objects.create(name=n, gpu_memory_gib=80) for n in ("a100-80g", "h100-80g")]
    clusters = []
    nodes = []
    for c in ("bj", "sh", "gz"):
        cluster = Cluster.objects.create(name=c, region=c)
        clusters.append(cluster)
        for i in range(50):
            nodes.append(Node(cluster=cluster, name=f"{c}-n{i:03d}", flavor=flavors[i % 2],
                              gpus=8, cpu=Decimal(96), memory_gib=Decimal(1024),
                              rack=f"r{i // 10}"))
    Node.objects.bulk_create(nodes)

    leaves: list[Queue] = []
    entries = []
    for d in range(10):
        dept = Queue(name=f"d{d}")
        dept.save()
        for f in flavors:
            entries.append(QuotaEntry(queue=dept, flavor=f, min=Decimal(60), max=Decimal(600)))
        for t in range(19):
            leaf = Queue(name=f"t{t}", parent=dept, namespace=f"d{d}-t{t}")
            leaf.save()
            leaves.append(leaf)
            for f in flavors:
                entries.append(QuotaEntry(queue=leaf, flavor=f, min=Decimal(3), max=Decimal(60)))
    QuotaEntry.objects.bulk_create(entries)
    assert Queue.objects.count() == 200

    admin = User.objects.create_superuser("admin", "admin@example.org", "bench-pass-1")
    users, teams, members = [], [], []
    for i, leaf in enumerate(leaves):
        users.append(User(username=f"u{i}", email=f"u{i}@example.org",
                          password=admin.password))
        teams.append(Team(name=f"team{i}", department=leaf.parent))
    User.objects.bulk_create(users)
    Team.objects.bulk_create(teams)
    users = list(User.objects.filter(username__startswith="u").order_by("id"))
    teams = list(Team.objects.order_by("id"))
    Through = Team.queues.through
    Through.objects.bulk_create([Through(team_id=t.pk, queue_id=q.pk)
                                 for t, q in zip(teams, leaves, strict=True)])
    for i, (u, team) in enumerate(zip(users, teams, strict=True)):
        members.append(TeamMembership(team=team, user=u, role=TeamRole.LEAD if i % 19 == 0
                                      else TeamRole.RESEARCHER))
    TeamMembership.objects.bulk_create(members)

    for name, value, can in (("inference-high", 10000, True), ("training", 1000, False),
                             ("batch-low", 100, False)):
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value,
                                                                 "can_preempt": can})
    training = PriorityClass.objects.get(name="training")
    now = datetime.now(UTC)
    states = (["finished"] * 78 + ["cancelled"] * 8 + ["pending"] * 8 + ["rejected"] * 5
              + ["running"] * 1)
    workloads = []
    for i in range(20_000):
        k = rnd.randrange(len(leaves))
        submitted = now - timedelta(minutes=rnd.randrange(1, 60 * 24 * 30))
        state = states[i % len(states)]
        workloads.append(Workload(
            name=f"w{i}", queue=leaves[k], team=teams[k], owner=users[k], state=state,
            priority_class=training, submitted_at=submitted, state_changed_at=submitted,
            finished_at=submitted + timedelta(hours=2) if state in ("finished", "cancelled",
                                                                      "rejected") else None,
            duration_hint_s=7200, image="registry.local/train:1.4", command=["python", "t.py"],
            reason_code="QUOTA_MAX" if state == "pending" else "",
            reason_message=(f"QUOTA_MAX: queue {leaves[k].path} a100-80g/gpu: used 60 + "
                            "requested 4 > max 60") if state == "pending" else "",
        ))
    Workload.objects.bulk_create(workloads, batch_size=2000)
    workloads = list(Workload.objects.order_by("id"))
    PodSet.objects.bulk_create([
        PodSet(workload=w, index=0, count=1, flavors=[flavors[w.pk % 2].name],
               gpus=rnd.choice((1, 2, 4, 8)), cpu=Decimal(8), memory_gib=Decimal(64))
        for w in workloads], batch_size=5000)
    admissions, events = [], []
    for w in workloads:
        at = w.submitted_at
        kinds = ["submitted"]
        if w.state in ("finished", "cancelled", "running"):
            adm_at = at + timedelta(minutes=rnd.randrange(0, 90))
            ended = None if w.state == "running" else adm_at + timedelta(hours=2)
            admissions.append(Admission(
                workload=w, cluster=clusters[w.pk % 3], flavor=flavors[w.pk % 2],
                nodes=[f"{clusters[w.pk % 3].name}-n{(w.pk // 3) % 50:03d}"], gpus=4,
                cpu=Decimal(8), memory_gib=Decimal(64), reserved_at=adm_at,
                running_at=adm_at + timedelta(seconds=20), ended_at=ended,
                end_reason="" if ended is None else "finished"))
            kinds += ["reason", "reason", "reason", "admitted", "dispatched", "running",
                      "reason", "finished" if w.state != "running" else "reason", "reason"]
        else:
            kinds += ["reason"] * 8 + ["rejected" if w.state == "rejected" else "reason"]
        for j, kind in enumerate(kinds):
            events.append(WorkloadEvent(workload=w, at=at + timedelta(seconds=30 * j), type=kind,
                                        code="QUOTA_MAX" if kind == "reason" else "",
                                        message=f"{kind} step {j}"))
    Admission.objects.bulk_create(admissions, batch_size=5000)
    WorkloadEvent.objects.bulk_create(events, batch_size=10000)
    assert WorkloadEvent.objects.count() == 200_000, WorkloadEvent.objects.count()
    CapacityRequest.objects.bulk_create([
        CapacityRequest(queue=leaves[i % len(leaves)], flavor=flavors[0], min=Decimal(4),
                        justification="more", starts_at=now, requested_by=users[i % len(users)])
        for i in range(500)])

    with __import__("django").db.connection.cursor() as cursor:
        # As autovacuum would have by the time such a database is in use (visibility map set).
        cursor.execute("VACUUM ANALYZE")
    return handles()


def handles() -> dict:
    """What the measurements need from a seeded database; fresh tokens for the load clients."""
    from django.contrib.auth import get_user_model

    from portal.models import ApiToken, token_generate, token_hash
    from scheduling.models import Workload

    User = get_user_model()
    users = list(User.objects.filter(username__startswith="u").order_by("id"))
    leaves = [u.teams.get().queues.get() for u in users[:CLIENTS]]
    ApiToken.objects.filter(user__in=users[:CLIENTS]).delete()
    tokens = []
    for u, leaf in zip(users[:CLIENTS], leaves, strict=True):
        raw = token_generate()
        ApiToken.objects.create(user=u, key_hash=token_hash(raw), prefix=raw[:8])
        tokens.append((raw, leaf.path))
    researcher = users[0]
    sample = Workload.objects.filter(owner=researcher, name__startswith="w").order_by("-id")[0]
    return {"admin": User.objects.get(username="admin"), "researcher": researcher,
            "tokens": tokens, "workload_id": sample.pk, "queue": leaves[0].path}


def measure_pages(h: dict, runs: int = 30) -> list[tuple[str, str, float, float]]:
    from django.test import Client

    urls = [
        "/dashboard/", "/workloads/", "/workloads/?state=finished&ordering=-submitted",
        f"/workloads/{h['workload_id']}/", f"/workloads/{h['workload_id']}/live/",
        "/capacity-requests/", "/approvals/", "/queues/", f"/queues/q/{h['queue']}/", "/fleet/",
        "/api/v1/workloads", "/api/v1/workloads?state=pending",
        f"/api/v1/workloads/{h['workload_id']}", "/api/v1/capacity-requests",
        "/api/v1/approvals", "/api/v1/queues", "/api/v1/clusters",
    ]
    if URL_FILTER:
        urls = [u for u in urls if any(part in u for part in URL_FILTER)]
    out = []
    for role, user in (("researcher", h["researcher"]), ("admin", h["admin"])):
        client = Client()
        client.force_login(user)
        for url in urls:
            times = []
            for i in range(runs + 3):
                t0 = time.perf_counter()
                r = client.get(url)
                dt = (time.perf_counter() - t0) * 1000
                if r.status_code != 200:
                    raise SystemExit(f"{role} GET {url}: {r.status_code}")
                if i >= 3:
                    times.append(dt)
            times.sort()
            p95 = times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)]
            out.append((role, url, statistics.median(times), p95))
    return out


def _forget_load() -> None:
    """The next load (and a BENCH_REUSE run) measures the same database, not a fuller one."""
    from django.db import connection

    from scheduling.models import Admission, Workload

    Admission.objects.filter(workload__name__startswith="load-").delete()
    Workload.objects.filter(name__startswith="load-").delete()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # no dead rows left for the next load to visit
    connection.close()


def flush_redis() -> None:
    import redis

    redis.Redis.from_url(REDIS).flushdb()


def main() -> None:
    if not REUSE:
        create_db()
    try:
        import django

        django.setup()
        from django.core.management import call_command

        t0 = time.perf_counter()
        if REUSE:
            call_command("migrate", verbosity=0)  # a kept database from an older tree
            h = handles()
            print(f"reusing the seeded database {BENCH_DB}")
        else:
            call_command("migrate", verbosity=0)
            h = seed()
            print(f"seeded 200 queues, 3 clusters, 20,000 workloads, 200,000 events in "
                  f"{time.perf_counter() - t0:.1f} s")
        if "pages" in PARTS:
            print("\nserver time per page / list endpoint (ms, 30 requests each, DEBUG off)")
            print(f"{'role':<11} {'url':<52} {'p50':>7} {'p95':>7}")
            worst = 0.0
            for role, url, p50, p95 in measure_pages(h):
                worst = max(worst, p95)
                flag = "" if p95 < 150 else "  > 150 ms"
                print(f"{role:<11} {url:<52} {p50:7.1f} {p95:7.1f}{flag}")
            print(f"worst p95: {worst:.1f} ms (target < 150 ms)")
        from django.db import connections

        connections.close_all()
        if "post" not in PARTS:
            return
        for clients, workers in LOADS:
            r = load_test(tokens=h["tokens"], clients=clients, workers=workers,
                          seconds=SECONDS, env={**os.environ, **ENV}, gunicorn=GUNICORN,
                          port=PORT, pg=PG, db=BENCH_DB, client=CLIENT)
            _forget_load()
            print("\n" + report(r, GUNICORN))
    finally:
        if KEEP:
            from django.db import connections

            connections.close_all()
        else:
            drop_db()
        try:
            flush_redis()
        except Exception as exc:  # a missing Redis only means there was nothing to flush
            print(f"(redis not flushed: {exc})", file=sys.stderr)


if __name__ == "__main__":
    main()
