"""Gunicorn's settings for the portal; gunicorn reads this file from the directory it starts in
(`gunicorn portal.wsgi`). Options on the command line win over these.

Keep-alive: an idle keep-alive connection is closed by the server after `keepalive` seconds. A
client that sends its next request on that connection just as the server closes it sees the
connection reset, and a POST is not retried for it. Gunicorn's default (2 s) made such resets
common between API calls a few seconds apart; connections now stay open 75 s, longer than the
clients and proxies in front usually keep an idle connection (nginx: 75 s, most HTTP client
pools less), so it is the client that closes. Behind a load balancer, set
GUNICORN_KEEPALIVE_S above the balancer's idle timeout (AWS ALB: 60 s).
"""

from __future__ import annotations

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# Gunicorn's threaded worker, taking a new connection only while it holds at most one more
# than its least loaded sibling, so keep-alive clients spread evenly over the processes
# (portal/gunicorn_worker.py).
worker_class = "portal.gunicorn_worker.BalancedThreadWorker"
# A few threads per process: more only contend for the interpreter lock (bench.portal).
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE_S", "75"))
# Connections waiting for a thread: 200 clients at once must queue, not be refused.
backlog = int(os.environ.get("GUNICORN_BACKLOG", "2048"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT_S", "60"))
graceful_timeout = 30
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None


def post_worker_init(worker: object) -> None:
    """Each worker, once the app is loaded: the collector's settings (core/runtime.py)."""
    from core.runtime import gc_tune

    gc_tune()


def child_exit(server: object, worker: object) -> None:
    """In the master, as a worker process leaves (even killed): its siblings stop counting
    its connections (portal/gunicorn_worker.py)."""
    from portal.gunicorn_worker import release

    release(worker.pid)  # type: ignore[attr-defined]
