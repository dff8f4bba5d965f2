"""The closing flush of a transactional test survives a deadlock with another connection
(as happens when a real worker process runs a cycle while a full-stack test ends)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection, connections

from core.db import postgres
from quotas.models import Flavor
from tests.flush import is_deadlock, retry_on_deadlock
from tests.integration.scheduling.stack.stack import database_url

pytestmark = pytest.mark.django_db(transaction=True)


def _flush_tables() -> tuple[str, str]:
    """The first and the last table of the flush's TRUNCATE, as it locks them in order."""
    (sql,) = connection.ops.sql_flush(no_style(), connection.introspection.django_table_names(
        only_existing=True, include_views=False))
    names = [part.strip().strip('"') for part in
             sql.split("TRUNCATE", 1)[1].split(";")[0].split("RESTART")[0].split(",")]
    return names[0], names[-1]


def _flush_waiting(other_pid: int) -> bool:
    with psycopg.connect(database_url(), autocommit=True) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> %s", [other_pid]
        ).fetchone()
    return bool(row and row[0])


def test_flush_retried_after_a_deadlock():
    if not postgres():
        pytest.skip("the deadlock is PostgreSQL's")
    Flavor.objects.create(name="left-over", gpu_memory_gib=80)
    first, last = _flush_tables()
    retries: list[BaseException] = []
    errors: list[BaseException] = []

    other = psycopg.connect(database_url())  # the "worker": a transaction holding a lock
    other.execute(f'SELECT 1 FROM "{last}" LIMIT 1')

    def flush() -> None:
        try:
            retry_on_deadlock(lambda: call_command("flush", interactive=False, verbosity=0,
                                                   inhibit_post_migrate=True),
                              on_retry=retries.append)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    flusher = threading.Thread(target=flush)
    flusher.start()
    deadline = time.monotonic() + 10
    while not _flush_waiting(other.info.backend_pid):  # the TRUNCATE waits for `last`
        assert time.monotonic() < deadline, "the flush never waited for the other connection"
        time.sleep(0.05)
    # The other transaction now needs a table the TRUNCATE already holds: a deadlock, which
    # the flush (waiting longer) detects, aborting itself; the other goes on and commits.
    other.execute(f'SELECT 1 FROM "{first}" LIMIT 1')
    other.commit()
    other.close()
    flusher.join(30)

    assert not flusher.is_alive() and errors == []
    assert len(retries) >= 1 and all(is_deadlock(exc) for exc in retries)
    assert not Flavor.objects.filter(name="left-over").exists()


def test_other_errors_are_not_retried():
    calls = []

    def fail() -> None:
        calls.append(1)
        raise ValueError("not a deadlock")

    with pytest.raises(ValueError):
        retry_on_deadlock(fail)
    assert calls == [1]
