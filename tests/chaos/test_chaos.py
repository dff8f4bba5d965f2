"""The fault suite's short version (`make test` runs it; `make chaos` runs the full one): 20
clients submitting and cancelling for 20 s while two workers are killed mid-cycle, the broker
and the database go down, then the invariants from the database and schemathesis as an admin
and as a researcher. It asserts the invariants, never throughput.

It runs in a process of its own, on its own throwaway PostgreSQL and Redis (not the test
database), so it needs nothing from pytest-django.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.run import TARGETS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(400)]


def test_faults_under_load_lose_nothing_and_break_no_invariant(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    out = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "TEST_DATABASE_NAME", "CELERY_BROKER_URL")}
    proc = subprocess.Popen([sys.executable, "-m", "tests.chaos.run", "--short", "--json",
                             str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # it stops its servers and processes on SIGTERM
        output, _ = proc.communicate(timeout=60)
        pytest.fail("the fault suite did not finish in 360 s:\n"
                    + output.decode(errors="replace")[-4000:])
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    figures = json.loads(out.read_text())
    assert {k: figures[k] for k in TARGETS} == dict.fromkeys(TARGETS, 0), text[-6000:]
    assert figures["schemathesis 5xx"] == {"admin": 0, "researcher": 0}
    # It did exercise what it claims to: work submitted and cancelled, faults injected.
    assert figures["submitted (201)"] > 0 and figures["cancelled (200, load)"] > 0
    kills = figures["faults"]["kills"]
    assert len(kills) == 2 and all(k["worker"] for k in kills), kills
    assert not figures["faults"]["errors"]
    assert figures["faults"]["db outages s"] and figures["faults"]["broker outages s"]
    assert min(figures["schemathesis requests"].values()) > 0
