"""The static files in production: `collectstatic` with the production settings and no
database (as the image's build runs it), and WhiteNoise serving what it collected."""

from __future__ import annotations

import gzip
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parents[3]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("staticfiles")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUG", "REDIS_URL", "CACHE_URL", "TEST_DATABASE_NAME")}
    env.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "ALLOT_ENV": "production",
                "SECRET_KEY": "collectstatic-at-build-time-" + "x" * 30, "STATIC_ROOT": str(root),
                # Nothing listens there: collecting must not need the database.
                "DATABASE_URL": f"postgres://allot@127.0.0.1:{_closed_port()}/allot"})
    done = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\d+ static files copied to", done.stdout), done.stdout
    return root


def test_collectstatic_gathers_every_file_the_pages_name(collected):
    named = set()
    for template in [*ROOT.glob("templates/**/*.html"), *ROOT.glob("*/templates/**/*.html")]:
        named |= set(re.findall(r"\{% static ['\"]([^'\"]+)['\"]", template.read_text()))
    assert {"vendor/htmx.min.js", "vendor/plotly-basic.min.js", "css/allot.css"} <= named
    for name in sorted(named):
        assert (collected / name).read_bytes() == (ROOT / "static" / name).read_bytes(), name
        assert (collected / f"{name}.gz").is_file(), f"{name}: no gzip copy"
    # The admin's and the API docs' own files come from their packages.
    assert (collected / "admin/css/base.css").is_file()
    assert (collected / "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js").is_file()


def test_whitenoise_serves_the_collected_files_with_debug_off(collected):
    with override_settings(STATIC_ROOT=str(collected), DEBUG=False,
                           WHITENOISE_AUTOREFRESH=False):
        client = Client()
        plain = client.get("/static/vendor/htmx.min.js")
        zipped = client.get("/static/vendor/plotly-basic.min.js", HTTP_ACCEPT_ENCODING="gzip")
        missing = client.get("/static/vendor/nothing.js")
    source = (ROOT / "static/vendor/htmx.min.js").read_bytes()
    assert plain.status_code == 200
    assert b"".join(plain.streaming_content) == source
    assert plain["Cache-Control"] == "max-age=60, public"
    assert zipped.status_code == 200 and zipped["Content-Encoding"] == "gzip"
    body = b"".join(zipped.streaming_content)
    assert gzip.decompress(body) == (ROOT / "static/vendor/plotly-basic.min.js").read_bytes()
    assert len(body) < len(gzip.decompress(body)) / 2
    assert missing.status_code == 404
