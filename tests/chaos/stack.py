"""The system under test, started as production runs it: gunicorn and Celery workers (the first
with the beat) against a throwaway PostgreSQL and a throwaway Redis broker (servers.py), on
the scheduling tests' small organisation (tests/integration/scheduling/world.py) with its
simulated clusters. And the faults: a worker killed with SIGKILL in the middle of a cycle, the
broker down, the database down (stopped as a crash: `pg_ctl stop -m immediate`).

Every process that touches the database names itself (`application_name`), so the suite can
tell which worker holds the scheduling lock, i.e. is in the middle of a cycle, and kill it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.servers import ThrowawayPostgres, ThrowawayRedis, free_port

ROOT = Path(__file__).resolve().parents[2]
DB = "allot_chaos"
WEB_OPTIONS = "-w 2 --threads 4"  # as README.md advises for production
LOCK_KEY = 0x616C6C6F74  # scheduling.locks.LOCK_KEY (asserted equal in setup)

# Settings of every process: short intervals so the system settles in seconds after a fault,
# and outbox leases that a killed worker does not hold for two minutes.
SETTINGS = {
    "DJANGO_SETTINGS_MODULE": "tests.settings",
    "DEBUG": "false",
    "LOG_LEVEL": "WARNING",
    "CONN_MAX_AGE": "60",
    "ALLOT_CYCLE_INTERVAL_S": "1",
    "ALLOT_SYNC_INTERVAL_S": "1",
    "ALLOT_OUTBOX_INTERVAL_S": "1",
    "ALLOT_OUTBOX_LEASE_S": "10",
    "ALLOT_OUTBOX_BACKOFF_MAX_S": "4",
    "ALLOT_WATCH_SESSION_S": "5",
    "PYTHONUNBUFFERED": "1",
}


@dataclass
class Users:
    """API tokens of the seeded users, and the leaf queue of each researcher."""

    researchers: list[tuple[str, str]]  # (token, queue path)
    lead: str
    admin: str


@dataclass
class Stack:
    pg: ThrowawayPostgres = field(default_factory=ThrowawayPostgres)
    redis: ThrowawayRedis = field(default_factory=ThrowawayRedis)
    port: int = field(default_factory=free_port)
    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="allot-chaos-")))
    web: subprocess.Popen[bytes] | None = None
    workers: dict[str, Any] = field(default_factory=dict)  # name -> CeleryWorker
    worker_logs: list[Path] = field(default_factory=list)  # of every worker started
    background: ThreadPoolExecutor = field(default_factory=ThreadPoolExecutor)
    restarts: list[Future] = field(default_factory=list)
    restarting: set[str] = field(default_factory=set)  # killed by the suite, or being restarted
    users: Users | None = None

    # --- start and stop --------------------------------------------------------------------

    def setup(self, *, workers: int) -> Users:
        """Servers up, schema migrated, organisation seeded, web and workers running."""
        self.pg.start()
        self.pg.create_database(DB)
        self.redis.start()
        os.environ.update({**SETTINGS, "SECRET_KEY": secrets.token_urlsafe(40),
                           "DATABASE_URL": self.pg.url(DB, application_name="chaos-harness"),
                           "CELERY_BROKER_URL": self.redis.url})
        os.environ.pop("TEST_DATABASE_NAME", None)
        import django

        django.setup()
        from django.core.management import call_command

        from scheduling.locks import LOCK_KEY as key

        assert key == LOCK_KEY, "tests/chaos/stack.py LOCK_KEY is out of date"
        call_command("migrate", verbosity=0)
        self.users = seed()
        with ThreadPoolExecutor() as pool:  # each waits seconds for its process to be ready
            started = [pool.submit(self.web_start)] + [
                pool.submit(self.worker_start, f"chaos-w{i + 1}", beat=i == 0)
                for i in range(workers)]
            for future in started:
                future.result()
        return self.users

    def web_start(self) -> None:
        env = {**os.environ, "DATABASE_URL": self.pg.url(DB, application_name="chaos-web")}
        self.web = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "portal.wsgi", "-b",
             f"127.0.0.1:{self.port}", *WEB_OPTIONS.split(), "--backlog", "2048",
             "--timeout", "60", "--log-level", "warning",
             # Longer than a client's pause, so no request meets a keep-alive being closed.
             "--keep-alive", "10",
             "--access-logfile", str(self.logs / "access.log"),
             "--access-logformat", "%(s)s %(m)s %(U)s"],
            cwd=ROOT, env=env, stdout=(self.logs / "web.log").open("ab"),
            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/login/")
                conn.getresponse().read()
                conn.close()
                return
            if self.web.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn did not answer; see {self.logs / 'web.log'}")

    def worker_start(self, name: str, *, beat: bool) -> None:
        from tests.integration.scheduling.stack.stack import CeleryWorker

        env = {**SETTINGS, "CELERY_BROKER_URL": self.redis.url,
               "DATABASE_URL": self.pg.url(DB, application_name=name)}
        worker = CeleryWorker(name, beat=beat, env=env)
        self.worker_logs.append(worker.log)
        self.workers[name] = worker.start(timeout=120)

    def worker_alive(self, name: str) -> bool:
        proc = self.workers[name].proc
        return proc is not None and proc.poll() is None

    def teardown(self, *, keep_logs: bool) -> None:
        self.restarts_join()
        self.background.shutdown()
        for worker in self.workers.values():
            with contextlib.suppress(Exception):
                worker.stop()
        if self.web is not None and self.web.poll() is None:
            os.killpg(self.web.pid, signal.SIGTERM)
            try:
                self.web.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.web.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        self.redis.destroy()
        self.pg.destroy()
        if not keep_logs:
            shutil.rmtree(self.logs, ignore_errors=True)
            for log in self.worker_logs:  # the log and the beat's schedule files beside it
                for path in log.parent.glob(f"{log.stem}.*"):
                    path.unlink(missing_ok=True)

    # --- faults ----------------------------------------------------------------------------

    def lock_holder(self, conn: psycopg.Connection) -> str | None:
        """The name of the worker holding the scheduling lock now (mid-cycle), if any."""
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a "
            "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s "
            "AND a.application_name LIKE 'chaos-w%%'", (LOCK_KEY,)).fetchone()
        return None if row is None else str(row[0])

    def _wait_for_holder(self, wait_s: float) -> str | None:
        """Poll (one connection, every few ms) until a worker holds the scheduling lock."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.pg.url(DB), autocommit=True,
                                     connect_timeout=2) as conn:
                    while time.monotonic() < deadline:
                        holder = self.lock_holder(conn)
                        if holder is not None:
                            return holder
                        time.sleep(0.002)
            except psycopg.Error:
                time.sleep(0.2)  # the database is down: try again until the deadline
        return None

    def kill_worker_mid_cycle(self, *, wait_s: float = 20.0, down_s: float = 1.0) -> dict:
        """SIGKILL the whole worker (pool, beat) that holds the scheduling lock, as soon as
        one does (within `wait_s`; otherwise a live worker); it is started again `down_s`
        later, in the background (`restarts_join` waits for it)."""
        holder = self._wait_for_holder(wait_s)
        if not self._alive():
            self.restarts_join()  # none to kill: wait for the restarts under way
        alive = self._alive()
        name = holder if holder in alive else next(iter(alive), None)
        if name is None:
            return {"worker": None, "mid_cycle": False, "skipped": "no live worker"}
        self.restarting.add(name)
        worker = self.workers[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
        self._restart(name, after_s=down_s)
        return {"worker": name, "mid_cycle": name == holder}

    def _alive(self) -> list[str]:
        return [n for n in self.workers if self.worker_alive(n) and n not in self.restarting]

    def _restart(self, name: str, *, after_s: float) -> None:
        beat = self.workers[name].beat

        def restart() -> None:
            try:
                time.sleep(after_s)
                self.worker_start(name, beat=beat)
            finally:
                self.restarting.discard(name)

        self.restarting.add(name)
        self.restarts.append(self.background.submit(restart))

    def supervise(self, stop: threading.Event, exits: list[dict], started: float) -> None:
        """As a process supervisor would: a worker that exited by itself (not killed by the
        suite) is recorded, with the last critical line of its log, and started again."""
        while not stop.wait(0.5):
            for name, worker in list(self.workers.items()):
                if name in self.restarting or self.worker_alive(name):
                    continue
                critical = [line for line in worker.tail(400).splitlines()
                            if "CRITICAL" in line or "Unrecoverable" in line]
                exits.append({"worker": name, "at s": round(time.monotonic() - started, 1),
                              "exit code": worker.proc.returncode,
                              "why": critical[-1][:300] if critical else worker.tail(3)})
                self._restart(name, after_s=0.0)

    def restarts_join(self) -> list[str]:
        """Wait for the restarts under way; the errors of those that failed."""
        waited = list(self.restarts)
        errors = [repr(f.exception()) for f in waited if f.exception() is not None]
        for future in waited:
            self.restarts.remove(future)
        return errors

    def broker_outage(self, seconds: float) -> None:
        self.redis.stop()
        time.sleep(seconds)
        self.redis.start()

    def db_outage(self, seconds: float) -> None:
        self.pg.stop("immediate")
        time.sleep(seconds)
        self.pg.start()


def seed() -> Users:
    """The organisation of the scheduling tests, on 2 simulated clusters of 2 nodes x 8 GPUs
    (32 GPUs: the fleet and the root queue's max bind at once) running 60 s per second, and
    an API token for each of its users."""
    from portal.models import ApiToken, token_generate, token_hash
    from tests.integration.scheduling.world import make_world

    world = make_world(speedup=60, nodes_per_cluster=2)

    def token(user: Any) -> str:
        raw = token_generate()
        ApiToken.objects.create(user=user, key_hash=token_hash(raw), prefix=raw[:8])
        return raw

    return Users(researchers=[(token(world.alice), world.vision.path),
                              (token(world.carol), world.nlp.path)],
                 lead=token(world.bob), admin=token(world.admin))
