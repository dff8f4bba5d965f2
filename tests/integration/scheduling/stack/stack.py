"""Real Celery worker processes against the test database and Redis (db 1 by default).

`CeleryWorker.start()` runs `celery -A portal worker` in a subprocess with DATABASE_URL naming
pytest-django's test database, so the worker sees what the test writes (use transactional
tests). The test process's own Celery app is pointed at the same broker, so the nudges that
`workload_submit` sends on commit reach the worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.db import connection

ROOT = Path(__file__).resolve().parents[4]
BROKER = os.environ.get("WORKERS_TEST_BROKER_URL", "redis://127.0.0.1:6379/1")


def database_url() -> str:
    s = connection.settings_dict
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or 5432
    auth = s.get("USER") or "postgres"
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    return f"postgres://{auth}@{host}:{port}/{s['NAME']}"


def flush_broker() -> None:
    import redis

    redis.Redis.from_url(BROKER).flushdb()


def point_app_at_broker() -> Any:
    """Send this process's tasks to the test broker; returns the previous URL."""
    from portal.celery import app

    previous = app.conf.broker_url
    app.conf.broker_url = BROKER
    app.pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None
    # kombu keeps producer pools per connection URL process-wide: forget the closed ones, or
    # later tests of this process sending a task get "Acquire on closed pool".
    from kombu import pools

    pools.reset()
    return previous


def restore_app_broker(previous: Any) -> None:
    from portal.celery import app

    app.conf.broker_url = previous
    app.pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None
    # kombu keeps producer pools per connection URL process-wide: forget the closed ones, or
    # later tests of this process sending a task get "Acquire on closed pool".
    from kombu import pools

    pools.reset()


class CeleryWorker:
    """One `celery worker` subprocess (with the beat embedded when `beat`)."""

    def __init__(self, name: str, *, beat: bool, env: dict[str, str] | None = None,
                 concurrency: int = 2) -> None:
        self.name = name
        self.beat = beat
        self.extra_env = env or {}
        self.concurrency = concurrency
        self.log = Path(tempfile.mkstemp(prefix=f"allot-{name}-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> CeleryWorker:
        env = {k: v for k, v in os.environ.items() if k != "TEST_DATABASE_NAME"}
        env.update({
            "DATABASE_URL": database_url(), "CELERY_BROKER_URL": BROKER,
            "ALLOT_CYCLE_INTERVAL_S": "0.5", "ALLOT_SYNC_INTERVAL_S": "0.5",
            "PYTHONUNBUFFERED": "1", **self.extra_env,
        })
        cmd = [str(Path(sys.executable).parent / "celery"), "-A", "portal", "worker",
               "--loglevel=INFO", f"--concurrency={self.concurrency}", "-n",
               f"{self.name}@%h", "--without-gossip", "--without-mingle",
               "--without-heartbeat"]
        if self.beat:
            cmd += ["-B", "-s", str(self.log.with_suffix(".beat"))]
        handle = open(self.log, "wb")  # noqa: SIM115 - the child writes it until stop()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited:\n{self.tail()}")
            if b" ready." in self.log.read_bytes():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"worker {self.name} not ready in {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # The worker leads its own session: its pool and embedded beat stop with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def wait_for(predicate: Any, *, timeout: float, interval: float = 0.2, what: str = "") -> Any:
    """Poll `predicate` until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
