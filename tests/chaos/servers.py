"""Throwaway servers the fault suite may stop and start at will: a PostgreSQL cluster made by
`initdb` in a temporary folder and a `redis-server`, each on a free loopback port. Never the
machine's own servers.

PostgreSQL refuses to run as root: when the suite runs as root (CI does), the cluster's folder
is given to the `postgres` user and `initdb`/`pg_ctl` run as that user (`runuser`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def pg_bin(name: str) -> str:
    """A PostgreSQL server program: on PATH, or in Debian's versioned folder."""
    found = shutil.which(name) or next(iter(sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"{name} not found (PostgreSQL's server package installs it)")
    return str(found)


def free_port() -> int:
    """A TCP port free on loopback now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class ThrowawayPostgres:
    """A PostgreSQL cluster of its own: `start()`, `stop(mode)` (`immediate` is a crash: no
    checkpoint, recovery from the WAL at the next start), `destroy()`.

    fsync is off: it only matters if the machine itself crashes, not the server process, so an
    immediate stop still loses nothing committed. synchronous_commit stays on for that reason.
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="allot-chaos-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")

    def _run(self, *cmd: str) -> None:
        cmd = (pg_bin(cmd[0]), *cmd[1:])
        argv = list(cmd) if self.user is None else ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}"
                               f"{done.stderr}\n{self.tail()}")

    def url(self, db: str, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}" + (f"?{query}" if query else "")

    def start(self) -> None:
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off "
                "-c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", opts, "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def destroy(self) -> None:
        if self.running():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class ThrowawayRedis:
    """A redis-server of its own (nothing kept on disk): a stop loses what it held, as a
    broker that dies does."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="allot-chaos-redis-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.root), "--logfile",
             str(self.root / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while not _answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL)  # a broker that dies: nothing saved, no goodbye
        self.proc.wait(timeout=10)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
