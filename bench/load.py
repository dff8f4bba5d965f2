"""The portal's POST load, for `bench.portal`: `POST /api/v1/workloads` from N concurrent
clients against gunicorn, optionally with the Celery workers (cycle, dispatch, sync, beat)
scheduling on the same database, as in production.

Each client is a thread with a keep-alive HTTP/1.1 connection (plain http.client: the load
generator shares the 2 cores, so it should cost as little as it can) and no think time, so the
latency is what a client waits with N in flight (Little's law: N / throughput on average).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.fullstack import start_workers

ROOT = Path(__file__).resolve().parent.parent
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class LoadResult:
    clients: int
    workers: int
    seconds: float
    ok: int
    errors: int
    latencies_ms: list[float]
    cpu_ms: tuple[float, float, float, float]  # gunicorn, PostgreSQL, workers, clients
    load: float
    admitted: int  # workloads the cycle admitted meanwhile (with workers)
    percentiles: list[float] | None = None  # p50, p95, p99 in ms when the client gave only those
    client: str = "python"  # the load generator: "python" threads or "wrk"

    @property
    def rps(self) -> float:
        return self.ok / self.seconds

    def pct(self, q: float) -> float:
        if self.percentiles is not None:
            return self.percentiles[{0.5: 0, 0.95: 1, 0.99: 2}[q]]
        if not self.latencies_ms:
            return 0.0
        return self.latencies_ms[min(len(self.latencies_ms) - 1,
                                     max(0, int(round(q * len(self.latencies_ms))) - 1))]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def _cpu(pg: str, db: str, gunicorn: int, workers: list[int]) -> tuple[float, float, float]:
    """CPU seconds so far of the gunicorn workers, the database's backends and the workers."""
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        backends = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (db,))]
    return (sum(_cpu_s(p) for p in _tree(gunicorn)), sum(_cpu_s(p) for p in backends),
            sum(_cpu_s(p) for w in workers for p in _tree(w)))


def _post(conn: http.client.HTTPConnection, headers: dict[str, str], body: bytes
          ) -> tuple[int, bytes]:
    conn.request("POST", "/api/v1/workloads", body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    if response.will_close:
        conn.close()  # sync workers close after each response; the next request reconnects
    return response.status, data


def _wait_up(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/login/")
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            time.sleep(0.2)


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """A warm shutdown (the task in hand finishes), then the whole session if it hangs."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


def _admitted(pg: str, db: str) -> int:
    with psycopg.connect(f"{pg}/{db}", autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM scheduling_admission").fetchone()
    return int(row[0]) if row else 0


# The wrk script: each request a new workload (a name unique per run, wrk thread and request:
# open workloads' names are unique in their queue, and the warm-up run comes first) of the
# next (token, queue) pair; answers other than 201 counted; the figures printed as one JSON
# line by `done`. Latencies are wrk's (microseconds, from the request written to the answer
# read), on completed requests (timeouts are counted as errors, and set to 60 s).
_WRK_LUA = """
local threads = {}
local next_id = 1
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end
function init(args)
  run = args[1]
  pairs_ = {}
  for i = 2, #args, 2 do table.insert(pairs_, {args[i], args[i + 1]}) end
  n, bad, shown = 0, 0, 0
end
function request()
  n = n + 1
  local p = pairs_[(n % #pairs_) + 1]
  local body = '{"name": "load-' .. run .. '-' .. tid .. '-' .. n .. '", "queue": "' .. p[2] ..
    '", "priority_class": "training", "duration_hint_s": 3600, "pods": [{"count": 1, ' ..
    '"flavors": ["a100-80g"], "gpus": 1, "cpu": 4, "memory_gib": 16}]}'
  return wrk.format("POST", "/api/v1/workloads", {["Authorization"] = "Token " .. p[1],
    ["Content-Type"] = "application/json"}, body)
end
function response(status, headers, body)
  if status ~= 201 then
    bad = bad + 1
    if shown < 3 then
      shown = shown + 1
      io.stderr:write(status .. " " .. body:sub(1, 200) .. "\\n")
    end
  end
end
function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + t:get("bad") end
  local e = summary.errors
  io.write(string.format('WRK {"requests": %d, "bad": %d, "errors": %d, "us": %d, ' ..
    '"p50": %d, "p95": %d, "p99": %d}\\n', summary.requests, b,
    e.connect + e.read + e.write + e.timeout, summary.duration,
    latency:percentile(50), latency:percentile(95), latency:percentile(99)))
end
"""


def _wrk(*, tokens: list[tuple[str, str]], clients: int, seconds: float, port: int
         ) -> dict[str, int]:
    """One wrk run (2 threads, `clients` keep-alive connections): its figures."""
    script = Path(tempfile.mkdtemp(prefix="allot-bench-wrk-")) / "post.lua"
    script.write_text(_WRK_LUA)
    args = [secrets.token_hex(4)] + [a for pair in tokens for a in pair]
    proc = subprocess.Popen(
        ["wrk", "-t2", f"-c{clients}", f"-d{seconds:g}s", "--timeout", "60s", "-s",
         str(script), f"http://127.0.0.1:{port}", "--", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=seconds + 120)
    line = next((x for x in out.splitlines() if x.startswith("WRK ")), None)
    if line is None:
        raise SystemExit(f"wrk printed no figures:\n{out}\n{err}")
    if err.strip():
        print(f"  wrk: {err.strip()[:600]}", file=sys.stderr)
    return dict(json.loads(line[4:]))


def load_test(*, tokens: list[tuple[str, str]], clients: int, workers: int, seconds: float,
              env: dict[str, str], gunicorn: str, port: int, pg: str, db: str,
              client: str = "python") -> LoadResult:
    """`clients` POSTing for `seconds` (after 2 s of warm-up) with `workers` Celery workers
    running; the clients share `tokens` (token, queue path) round robin.

    `client`: "python" (a thread per client in this process) or "wrk" (Debian's wrk: two
    event-loop threads in C; the load generator then costs a few percent of a core, and a
    client's latency holds no wait for this process's GIL, which 200 Python threads add)."""
    log = Path(tempfile.mkdtemp(prefix="allot-bench-load-")) / "server.log"
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "portal.wsgi", "-b", f"127.0.0.1:{port}",
         *gunicorn.split(), "--log-level", "warning", "--backlog", "2048"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )
    procs: list[subprocess.Popen] = []
    try:
        _wait_up(port)
        procs = start_workers(workers, 2, env, name="load", loglevel="WARNING",
                              logs=log.parent) if workers else []
        if client == "wrk":
            return _load_wrk(tokens=tokens, clients=clients, workers=workers, seconds=seconds,
                             port=port, pg=pg, db=db, gunicorn_pid=proc.pid,
                             worker_pids=[p.pid for p in procs])
        counts = {"ok": 0, "other": 0}
        latencies: list[float] = []
        lock = threading.Lock()
        start_at = time.monotonic() + 2.0  # the first 2 s warm the workers up, not counted
        stop_at = start_at + seconds

        def one_client(n: int) -> None:
            token, queue = tokens[n % len(tokens)]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
            i = 0
            while True:
                now = time.monotonic()
                if now >= stop_at:
                    conn.close()
                    return
                body = json.dumps({
                    "name": f"load-{n}-{i}", "queue": queue, "priority_class": "training",
                    "duration_hint_s": 3600,
                    "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 1, "cpu": 4,
                              "memory_gib": 16}]}).encode()
                t0 = time.perf_counter()
                try:
                    status, data = _post(conn, headers, body)
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    with lock:
                        counts["other"] += 1
                        if counts["other"] <= 3:
                            print(f"  POST failed: {exc!r}", file=sys.stderr)
                    i += 1
                    continue
                dt = time.perf_counter() - t0
                i += 1
                if now < start_at:
                    continue
                with lock:
                    if status == 201:
                        counts["ok"] += 1
                        latencies.append(dt * 1000)
                    else:
                        counts["other"] += 1
                        if counts["other"] <= 3:
                            print(f"  POST -> {status}: {data[:200]!r}", file=sys.stderr)

        threads = [threading.Thread(target=one_client, args=(n,)) for n in range(clients)]
        for t in threads:
            t.start()
        # CPU per request of each side: on a shared machine the rate depends on the
        # neighbours, these do not.
        time.sleep(max(0.0, start_at - time.monotonic()))
        worker_pids = [p.pid for p in procs]
        cpu0, client0 = _cpu(pg, db, proc.pid, worker_pids), time.process_time()
        admitted0 = _admitted(pg, db)
        time.sleep(max(0.0, stop_at - time.monotonic()))
        cpu1, client1 = _cpu(pg, db, proc.pid, worker_pids), time.process_time()
        admitted1 = _admitted(pg, db)
        for t in threads:
            t.join()
        latencies.sort()
        n = max(1, counts["ok"])
        return LoadResult(
            clients=clients, workers=workers, seconds=seconds, ok=counts["ok"],
            errors=counts["other"], latencies_ms=latencies,
            cpu_ms=((cpu1[0] - cpu0[0]) * 1000 / n, (cpu1[1] - cpu0[1]) * 1000 / n,
                    (cpu1[2] - cpu0[2]) * 1000 / n, (client1 - client0) * 1000 / n),
            load=os.getloadavg()[0], admitted=admitted1 - admitted0)
    finally:
        stop_workers(procs)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        tail = "".join(f.read_text(errors="replace")
                       for f in sorted(log.parent.glob("*.log")))[-2000:]
        if tail.strip():
            print(f"  (server and worker log, last lines)\n{tail}", file=sys.stderr)


def _children_cpu_s() -> float:
    """CPU seconds of this process's reaped children so far (wrk, once it has exited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load_wrk(*, tokens: list[tuple[str, str]], clients: int, workers: int, seconds: float,
              port: int, pg: str, db: str, gunicorn_pid: int, worker_pids: list[int]
              ) -> LoadResult:
    """The measured part of `load_test` with wrk: 2 s of warm-up, then `seconds` measured."""
    _wrk(tokens=tokens, clients=clients, seconds=2.0, port=port)
    cpu0, client0 = _cpu(pg, db, gunicorn_pid, worker_pids), _children_cpu_s()
    admitted0 = _admitted(pg, db)
    figures = _wrk(tokens=tokens, clients=clients, seconds=seconds, port=port)
    cpu1, client1 = _cpu(pg, db, gunicorn_pid, worker_pids), _children_cpu_s()
    admitted1 = _admitted(pg, db)
    ok = figures["requests"] - figures["bad"]
    n = max(1, ok)
    elapsed = figures["us"] / 1e6
    # wrk gives percentiles, not every latency: three stand-ins placed so `pct` reads them.
    marks = [figures["p50"] / 1000, figures["p95"] / 1000, figures["p99"] / 1000]
    return LoadResult(
        clients=clients, workers=workers, seconds=elapsed, ok=ok,
        errors=figures["bad"] + figures["errors"], latencies_ms=[],
        cpu_ms=((cpu1[0] - cpu0[0]) * 1000 / n, (cpu1[1] - cpu0[1]) * 1000 / n,
                (cpu1[2] - cpu0[2]) * 1000 / n, (client1 - client0) * 1000 / n),
        load=os.getloadavg()[0], admitted=admitted1 - admitted0, percentiles=marks,
        client="wrk")


def report(r: LoadResult, gunicorn: str) -> str:
    web, db, workers, client = r.cpu_ms
    total = web + db + workers + client
    with_workers = f"{r.workers} worker(s) scheduling" if r.workers else "no workers"
    return (f"POST /api/v1/workloads, {r.clients} clients ({r.client}), {with_workers}, "
            f"{r.seconds:.0f} s, "
            f"gunicorn {gunicorn}: {r.rps:.0f} req/s ({r.ok} created, {r.errors} errors), "
            f"latency p50 {r.pct(0.5):.0f} ms, p95 {r.pct(0.95):.0f} ms, p99 "
            f"{r.pct(0.99):.0f} ms" + (f"; {r.admitted} admitted meanwhile" if r.workers else "")
            + f"\n  CPU per request: gunicorn {web:.2f} ms + PostgreSQL {db:.2f} ms + workers "
            f"{workers:.2f} ms + load clients {client:.2f} ms = {total:.2f} ms; 2 cores / that "
            f"= {2000 / max(total, 0.01):.0f} req/s if nothing else ran "
            f"(load average {r.load:.1f})")
