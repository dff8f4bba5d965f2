"""Moved to tests/integration/scheduling/stack/stack.py; this name stays for the modules that
still import it (tests/integration/test_flush_deadlock.py) until they import the new one."""

from tests.integration.scheduling.stack.stack import (
    BROKER,
    CeleryWorker,
    database_url,
    flush_broker,
    point_app_at_broker,
    restore_app_broker,
    wait_for,
)

__all__ = ["BROKER", "CeleryWorker", "database_url", "flush_broker", "point_app_at_broker",
           "restore_app_broker", "wait_for"]
