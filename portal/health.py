"""Liveness and readiness for probes and load balancers: `GET /healthz` and `GET /readyz`.

`/healthz` says the process serves requests, and reads nothing (a database outage must not
get every web process restarted). `/readyz` says this process can serve the portal: the
database answers, every migration this code knows is applied, and the cache takes a write
and gives it back; otherwise 503 with a JSON body naming each check and what failed. Error
details (addresses, driver messages) go to the log, not into the public answer.

`HealthMiddleware`, first in MIDDLEWARE, answers both before anything else runs: no HTTPS
redirect (a probe speaks plain HTTP to the pod), no host check (a kubelet's probe names the
pod's address as Host, which ALLOWED_HOSTS does not list), no session and no sign-in.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from django.core.cache import cache
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

HEALTHZ = "/healthz"
READYZ = "/readyz"
OK = "ok"
# How many unapplied migrations the answer names (the count is always given).
NAMED_MIGRATIONS = 5


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as error:
        logger.warning("readyz: the database is unreachable: %s", error)
        return f"unreachable ({type(error).__name__})"
    return OK


def _migrations() -> str:
    """The migrations on disk that the database has not applied (as `migrate --check`)."""
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        logger.warning("readyz: cannot read the applied migrations: %s", error)
        return f"unreadable ({type(error).__name__})"
    if not plan:
        return OK
    names = [f"{m.app_label}.{m.name}" for m, _backwards in plan]
    more = f" and {len(names) - NAMED_MIGRATIONS} more" if len(names) > NAMED_MIGRATIONS else ""
    return f"{len(names)} not applied: {', '.join(names[:NAMED_MIGRATIONS])}{more}"


def _cache() -> str:
    key, value = f"allot:readyz:{secrets.token_hex(8)}", secrets.token_hex(8)
    try:
        cache.set(key, value, timeout=10)
        read = cache.get(key)
        cache.delete(key)
    except Exception as error:  # any backend's error (Redis, memcached, ...) means the same
        logger.warning("readyz: the cache is unreachable: %s", error)
        return f"unreachable ({type(error).__name__})"
    if read != value:
        return "a value written could not be read back"
    return OK


def readiness() -> dict[str, str]:
    """Each check by name: `ok`, or what failed (migrations are not read without a database)."""
    checks = {"database": _database()}
    if checks["database"] == OK:
        checks["migrations"] = _migrations()
    else:
        checks["migrations"] = "not checked: the database is unreachable"
    checks["cache"] = _cache()
    return checks


def _answer(status: int, body: dict[str, object]) -> JsonResponse:
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    return response


def healthz() -> JsonResponse:
    """200 while the process serves requests; reads nothing."""
    return _answer(200, {"status": OK})


def readyz() -> JsonResponse:
    """200 when every readiness check passes; 503 naming the ones that failed."""
    checks = readiness()
    failed = [name for name, result in checks.items() if result != OK]
    if failed:
        return _answer(503, {"status": "unavailable", "failed": failed, "checks": checks})
    return _answer(200, {"status": OK, "checks": checks})


_ENDPOINTS: dict[str, Callable[[], JsonResponse]] = {HEALTHZ: healthz, READYZ: readyz}


class HealthMiddleware:
    """Answers `/healthz` and `/readyz` (GET or HEAD) before every other middleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        endpoint = _ENDPOINTS.get(request.path_info.rstrip("/") or "/")
        if endpoint is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = _answer(405, {"detail": f"{request.method} not allowed: use GET or HEAD"})
            response["Allow"] = "GET, HEAD"
            return response
        response = endpoint()
        if request.method == "HEAD":
            response.content = b""
        return response
