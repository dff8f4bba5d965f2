"""`/healthz` and `/readyz` (portal/health.py): answered to a probe on the pod's address over
plain HTTP, without signing in; `/readyz` is 503 naming what failed when the database, the
migrations or the cache are not there."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
POD = "10.42.0.7:8000"  # a kubelet's probe names the pod's address as Host
PRODUCTION = {"ALLOWED_HOSTS": ["allot.example.org"], "SECURE_SSL_REDIRECT": True}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_reads_nothing_and_needs_no_host_https_or_sign_in(
        django_assert_num_queries):
    with override_settings(**PRODUCTION), django_assert_num_queries(0):
        response = Client().get("/healthz", HTTP_HOST=POD)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    with override_settings(**PRODUCTION):
        # The same request to a page: refused by the host check, as the probe would be
        # without HealthMiddleware first.
        assert Client().get("/login/", HTTP_HOST=POD).status_code == 400
        assert Client().get("/login/", HTTP_HOST="allot.example.org").status_code == 301


def test_readyz_checks_the_database_the_migrations_and_the_cache():
    with override_settings(**PRODUCTION):
        response = Client().get("/readyz", HTTP_HOST=POD)
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {
        "database": "ok", "migrations": "ok", "cache": "ok"}}
    assert response["Cache-Control"] == "no-store"


def test_readyz_names_a_migration_the_database_has_not_applied():
    app, name = sorted(MigrationLoader(None).graph.leaf_nodes())[0]
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute("DELETE FROM django_migrations WHERE app = %s AND name = %s", [app, name])
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable", "failed": ["migrations"],
        "checks": {"database": "ok", "migrations": f"1 not applied: {app}.{name}",
                   "cache": "ok"}}


def test_readyz_is_503_when_the_cache_cannot_be_reached():
    unreachable = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                               "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0"}}
    with override_settings(CACHES=unreachable):
        response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["cache"]
    assert body["checks"]["cache"] == "unreachable (ConnectionError)"
    assert body["checks"]["database"] == "ok"


def test_readyz_is_503_when_the_database_cannot_be_reached():
    # A process of its own whose database and cache are on ports nobody listens on: the real
    # connection failures, not a stand-in.
    code = ("import django, json; django.setup(); from django.test import Client; "
            "r = Client().get('/readyz', HTTP_HOST='allot.example.org'); "
            "print(json.dumps({'status': r.status_code, 'body': r.json()}))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "ALLOT_ENV": "production",
           "SECRET_KEY": "readyz-test-" + "x" * 50, "ALLOWED_HOSTS": "allot.example.org",
           "SECURE_SSL_REDIRECT": "false",
           "DATABASE_URL": f"postgres://allot@127.0.0.1:{_closed_port()}/allot",
           "CACHE_URL": f"redis://127.0.0.1:{_closed_port()}/0"}
    env.pop("REDIS_URL", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"status": 503, "body": {
        "status": "unavailable", "failed": ["database", "migrations", "cache"],
        "checks": {"database": "unreachable (OperationalError)",
                   "migrations": "not checked: the database is unreachable",
                   "cache": "unreachable (ConnectionError)"}}}
    assert "readyz: the database is unreachable: connection failed" in done.stderr


def test_only_get_and_head_are_answered():
    response = Client().post("/readyz")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json() == {"detail": "POST not allowed: use GET or HEAD"}
    head = Client().head("/healthz")
    assert head.status_code == 200 and head.content == b""
