"""Command-line figures: `python -m bench.cli`.

The time of `allot list` on 20,000 workloads: bench.portal's database (its own,
`allot_bench_cli`, created and dropped here: 200 queues, 3 clusters, 20,000 workloads and
200,000 events, seeded with bulk inserts) served by gunicorn on 127.0.0.1:8702 with DEBUG off;
`allot` run as a user runs it, a process of its own (`python -m allot_cli`, the interpreter's
start included), with the token in ALLOT_TOKEN. Measured, as a platform admin (who sees all
20,000) and as a researcher (who sees the ~100 of their team):

- `allot --version`: the process alone (interpreter, imports), no request;
- `allot list`: the default, the newest 50 (one page of the API);
- `allot list --all`: every visible workload, page after page of 1,000 (`?page=N&page_size=`);
- `allot list --all -o json`: the same, printed as JSON.

Each is run BENCH_RUNS times (default 5; `--all` as the admin 3 times); the median and the
slowest are printed, with the number of requests. Then the API alone, from this process over
one kept connection: the time of the first, middle and last page, and of reading all 20,000
one page after the other, in pages of 50 (the default) and of 1,000 (what `--all` asks for).

Environment: BENCH_PG, BENCH_REDIS, BENCH_GUNICORN (as bench.portal), BENCH_CLI_DB (the
database, default `allot_bench_cli`), BENCH_KEEP=1 and BENCH_REUSE=1 (keep the database;
measure a kept one again without seeding).
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["BENCH_DB"] = os.environ.get("BENCH_CLI_DB", "allot_bench_cli")

from allot_cli.client import PAGE_SIZE  # noqa: E402
from bench import portal  # noqa: E402  (reads BENCH_DB when imported)
from bench.load import _wait_up  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PORT = 8702
RUNS = int(os.environ.get("BENCH_RUNS", "5"))


def _allot(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "allot_cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"allot {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return elapsed, done.stdout


def _get(conn: http.client.HTTPConnection, token: str, page: int, size: int) -> bytes:
    conn.request("GET", f"/api/v1/workloads?page={page}&page_size={size}",
                 headers={"Authorization": f"Token {token}"})
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"GET page {page} of {size}: {response.status}")
    return body


def _page_ms(token: str, page: int, size: int, runs: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    times = []
    for _ in range(runs + 1):  # the first warms the connection and the worker up
        t0 = time.perf_counter()
        _get(conn, token, page, size)
        times.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return statistics.median(times[1:])


def _read_all(token: str, size: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    page = 1
    while json.loads(_get(conn, token, page, size))["next"]:
        page += 1
    conn.close()


def measure(tokens: dict[str, str]) -> None:
    base = {**os.environ, "ALLOT_SERVER": f"http://127.0.0.1:{PORT}",
            "ALLOT_CONFIG": str(Path(tempfile.mkdtemp(prefix="allot-bench-cli-")) / "c.toml"),
            "PYTHONPATH": str(ROOT)}
    print(f"\n`allot` as a process (python -m allot_cli), median and slowest of the runs; "
          f"gunicorn {portal.GUNICORN}, DEBUG off")
    print(f"{'who':<11} {'command':<28} {'rows':>6} {'requests':>8} {'median s':>9} "
          f"{'max s':>7}")
    cases = [("--version",), ("list",), ("list", "--all"), ("list", "--all", "-o", "json")]
    for who, token in tokens.items():
        env = {**base, "ALLOT_TOKEN": token}
        for args in cases:
            runs = 3 if who == "admin" and "--all" in args else RUNS
            times, out = [], ""
            for _ in range(runs):
                elapsed, out = _allot(list(args), env)
                times.append(elapsed)
            if args[0] == "--version":
                rows = requests = 0
            else:
                rows = len(json.loads(out)) if "json" in args else len(
                    [line for line in out.splitlines()[1:] if not line.startswith("(")])
                requests = -(-rows // PAGE_SIZE) if "--all" in args else 1
            print(f"{who:<11} {'allot ' + ' '.join(args):<28} {rows:>6} {requests:>8} "
                  f"{statistics.median(times):>9.2f} {max(times):>7.2f}")
    admin = tokens["admin"]
    print("\nthe API alone, as the admin: GET /api/v1/workloads?page=N&page_size=S over one "
          "kept connection (median of 5 per page)")
    for size in (50, PAGE_SIZE):
        last = -(-20_000 // size)
        pages = {p: _page_ms(admin, p, size, runs=5) for p in (1, last // 2, last)}
        t0 = time.perf_counter()
        _read_all(admin, size)
        print(f"  pages of {size}: " + ", ".join(f"page {p} {ms:.0f} ms"
                                                for p, ms in pages.items())
              + f"; all {last} pages one after the other: {time.perf_counter() - t0:.1f} s")


def main() -> None:
    if not portal.REUSE:
        portal.create_db()
    server = None
    try:
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from portal.services import api_token_create

        t0 = time.perf_counter()
        call_command("migrate", verbosity=0)
        if portal.REUSE:
            print(f"reusing the seeded database {portal.BENCH_DB}")
        else:
            portal.seed()
            print(f"seeded 200 queues, 3 clusters, 20,000 workloads, 200,000 events in "
                  f"{time.perf_counter() - t0:.1f} s")
        users = get_user_model().objects
        researcher = users.filter(username__startswith="u").order_by("id").first()
        tokens = {"admin": api_token_create(user=users.get(username="admin"))[1],
                  "researcher": api_token_create(user=researcher)[1]}
        from django.db import connections

        connections.close_all()
        log = Path(tempfile.mkdtemp(prefix="allot-bench-cli-")) / "server.log"
        env = {**os.environ, **portal.ENV, "SECRET_KEY": secrets.token_urlsafe(40)}
        server = subprocess.Popen(
            [str(ROOT / ".venv/bin/gunicorn"), "portal.wsgi", "-b", f"127.0.0.1:{PORT}",
             *portal.GUNICORN.split(), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        _wait_up(PORT)
        measure(tokens)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if portal.KEEP:
            from django.db import connections

            connections.close_all()
        else:
            portal.drop_db()


if __name__ == "__main__":
    main()
