"""Transport security and the CSP come from the environment: in production
(`ALLOT_ENV=production`, or DEBUG off) `manage.py check --deploy` finds nothing; weak hashers
and a cache each process keeps apart are named by our own deployment checks."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = {
    "ALLOT_ENV": "production",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "allot.example.org",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
}


def run(code_or_args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {
        "DEBUG", "ALLOT_ENV", "SECRET_KEY", "CACHE_URL", "REDIS_URL", "PASSWORD_HASHERS",
        "ALLOWED_HOSTS",
        # Set by the browser tests in this process (Playwright runs an event loop); a
        # deployment never has it, and check --deploy refuses it (async.E001).
        "DJANGO_ALLOW_ASYNC_UNSAFE"}
        and not k.startswith(("SECURE_", "SESSION_", "CSRF_", "ALLOT_CSP"))}
    return subprocess.run(
        [sys.executable, *code_or_args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", **env})


def check_deploy(**env: str) -> subprocess.CompletedProcess[str]:
    return run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **env)


def setting(name: str, **env: str) -> str:
    done = run(["-c", f"import django; django.setup(); from django.conf import settings; "
                f"print(repr(settings.{name}))"], **env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_production_passes_check_deploy_with_no_warning():
    done = check_deploy(**PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "System check identified no issues (0 silenced)."


def test_debug_off_alone_keeps_plain_http():
    # A benchmark or a local run over loopback: no redirect to an HTTPS nobody serves.
    env = {"DEBUG": "false", "SECRET_KEY": PRODUCTION["SECRET_KEY"]}
    assert setting("SECURE_SSL_REDIRECT", **env) == "False"
    assert setting("SESSION_COOKIE_SECURE", **env) == "False"


def test_development_defaults_warn():
    done = check_deploy()
    assert done.returncode == 1
    for check in ("security.W004", "security.W008", "security.W012", "security.W016",
                  "security.W018", "allot.W002"):
        assert check in done.stderr, check


def test_the_tests_md5_hasher_and_an_unshared_cache_are_named():
    env = {**PRODUCTION, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = check_deploy(**env)
    assert done.returncode == 1
    assert "(allot.W001) PASSWORD_HASHERS holds weak hashers: " \
        "django.contrib.auth.hashers.MD5PasswordHasher" in done.stderr
    assert "(allot.W002) the default cache (django.core.cache.backends.locmem.LocMemCache)" \
        in done.stderr


def test_production_needs_a_secret_key():
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    done = check_deploy(**env)
    assert done.returncode == 1
    assert "SECRET_KEY must be set in production (or when DEBUG is off)" in done.stderr


def test_each_setting_is_read_from_the_environment():
    assert setting("SECURE_SSL_REDIRECT", **PRODUCTION, SECURE_SSL_REDIRECT="false") == "False"
    assert setting("SECURE_PROXY_SSL_HEADER", **PRODUCTION,
                   SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https") == (
        "('HTTP_X_FORWARDED_PROTO', 'https')")
    assert setting("SECURE_HSTS_SECONDS", SECURE_HSTS_SECONDS="600") == "600"
    assert setting("CSRF_COOKIE_SECURE", CSRF_COOKIE_SECURE="true") == "True"
    assert setting("CACHES['default']['BACKEND']", REDIS_URL="redis://127.0.0.1:6379/3") == (
        "'django.core.cache.backends.redis.RedisCache'")
    assert setting("CONTENT_SECURITY_POLICY_REPORT_ONLY['DIRECTIVES']['script-src']",
                   ALLOT_CSP="report-only") == "[\"'self'\"]"


@pytest.mark.django_db
def test_pages_carry_the_csp_and_hsts(settings):
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_SSL_REDIRECT = True
    client = Client()
    assert client.get("/login/").status_code == 301  # to https
    response = client.get("/login/", secure=True)
    assert response.status_code == 200
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
    csp = dict(d.strip().split(" ", 1) for d in response["Content-Security-Policy"].split(";"))
    assert csp["script-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
    assert csp["default-src"] == "'self'"


def test_secret_key_fallbacks_are_read_from_the_environment():
    assert setting("SECRET_KEY_FALLBACKS", **PRODUCTION,
                   SECRET_KEY_FALLBACKS="old-key-1,old-key-2") == "['old-key-1', 'old-key-2']"
    assert setting("SECRET_KEY_FALLBACKS", **PRODUCTION) == "[]"


@pytest.mark.django_db
def test_a_rotated_secret_key_keeps_sessions_while_it_is_a_fallback(settings):
    from tests.factories import UserFactory

    settings.SECRET_KEY = "the-key-before-the-rotation-" + "a" * 30
    active, idle, unlucky = Client(), Client(), Client()
    for client in (active, idle, unlucky):
        client.force_login(UserFactory())
    settings.SECRET_KEY = "the-new-key-" + "b" * 40
    assert unlucky.get("/").status_code == 302  # rotated without the fallback: signed out
    settings.SECRET_KEY_FALLBACKS = ["the-key-before-the-rotation-" + "a" * 30]
    assert active.get("/").status_code == 200  # still signed in; its session is re-signed
    settings.SECRET_KEY_FALLBACKS = []
    assert active.get("/").status_code == 200
    response = idle.get("/")  # not used while the old key was a fallback
    assert response.status_code == 302 and response["Location"].startswith("/login/")
