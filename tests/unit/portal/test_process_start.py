"""What a process reads at start (each case in a fresh interpreter, as gunicorn and Celery
start one): the periodic sync's interval follows the watch, and the WSGI module loads the
broker's client before the first request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("ALLOT_WATCH", "ALLOT_SYNC_INTERVAL_S")}
    base.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "SECRET_KEY": "k" * 50,
                 "DEBUG": "false", **env})
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=base, check=True,
                         capture_output=True, text=True, timeout=120)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


SYNC = ("import json; from django.conf import settings; "
        "s = settings.CELERY_BEAT_SCHEDULE['scheduling-sync']; "
        "print(json.dumps({'every': s['schedule'], 'watch': settings.ALLOT_WORKERS['watch']}))")


def test_the_periodic_sync_is_a_resync_every_10_s_with_the_watch_and_2_s_without():
    assert _run(SYNC) == {"every": 10.0, "watch": True}
    assert _run(SYNC, ALLOT_WATCH="false") == {"every": 2.0, "watch": False}
    assert _run(SYNC, ALLOT_SYNC_INTERVAL_S="4") == {"every": 4.0, "watch": True}


def test_the_wsgi_module_loads_the_brokers_client_before_any_request():
    code = ("import json, sys; import portal.wsgi; "
            "print(json.dumps({'loaded': 'kombu.transport.redis' in sys.modules}))")
    assert _run(code, CELERY_BROKER_URL="redis://127.0.0.1:1/0") == {"loaded": True}
