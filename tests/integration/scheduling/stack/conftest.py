"""Fixtures of the full-stack tests: a real Celery worker (with beat) on Redis db 1."""

from __future__ import annotations

import pytest

from tests.integration.scheduling.stack.stack import (
    CeleryWorker,
    flush_broker,
    point_app_at_broker,
    restore_app_broker,
)

PODS_READY_TIMEOUT_S = 8


@pytest.fixture(scope="module")
def celery_worker(django_db_setup, django_db_blocker):
    """One worker with the beat for the module's tests (pods-ready timeout 8 s)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the full-stack tests need PostgreSQL")
    flush_broker()
    previous = point_app_at_broker()
    with django_db_blocker.unblock():
        worker = CeleryWorker("allot-test-w1", beat=True, env={
            "ALLOT_PODS_READY_TIMEOUT_S": str(PODS_READY_TIMEOUT_S),
            "ALLOT_DISPATCH_PENALTY_S": "120"}).start()
    yield worker
    worker.stop()
    restore_app_broker(previous)
