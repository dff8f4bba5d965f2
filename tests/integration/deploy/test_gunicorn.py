"""gunicorn.conf.py: what gunicorn runs with when started from the repository."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}
    env.pop("TEST_DATABASE_NAME", None)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "portal.wsgi",
                             "-b", f"127.0.0.1:{port}", "-w", "1"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"gunicorn exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
    yield port
    proc.terminate()
    proc.wait(timeout=20)


def test_an_idle_keep_alive_connection_outlives_a_pause_between_requests(server) -> None:
    # Gunicorn's own default closes an idle connection after 2 s: a request sent on it just
    # then is reset, and a POST is not retried. Requests 3 s apart share one connection.
    # The port opens before the worker has loaded the portal: on a loaded machine its first
    # answer took over 10 s.
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=60)
    for _ in range(2):
        conn.request("GET", "/login/")
        response = conn.getresponse()
        response.read()
        assert response.status == 200 and not response.will_close
        sock = conn.sock
        time.sleep(3)
    assert conn.sock is sock  # the same connection, not a reconnect
    conn.close()
