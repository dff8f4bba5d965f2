"""The SQLite triggers kept after every migrate (scheduling/sqlite_triggers.py), run on an
in-memory SQLite database holding the columns they read."""

from __future__ import annotations

import sqlite3

import pytest

from scheduling.sqlite_triggers import sqlite_triggers


@pytest.fixture
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE scheduling_workload (id INTEGER PRIMARY KEY, state TEXT, "
                 "gpus_total DECIMAL)")
    conn.execute("CREATE TABLE scheduling_podset (id INTEGER PRIMARY KEY, workload_id INTEGER, "
                 "count INTEGER, gpus DECIMAL)")
    for sql in sqlite_triggers():
        conn.execute(sql)
    for sql in sqlite_triggers():  # again: IF NOT EXISTS, as after every migrate
        conn.execute(sql)
    conn.execute("INSERT INTO scheduling_workload VALUES (1, 'pending', 8), (2, 'pending', 4)")
    conn.execute("INSERT INTO scheduling_podset VALUES (1, 1, 2, 4), (2, 2, 1, 4)")
    return conn


def test_an_illegal_transition_is_refused_naming_the_pair(db: sqlite3.Connection) -> None:
    db.execute("UPDATE scheduling_workload SET state = 'cancelled' WHERE id = 1")
    with pytest.raises(sqlite3.IntegrityError, match="cancelled -> reserved"):
        db.execute("UPDATE scheduling_workload SET state = 'reserved' WHERE id = 1")
    assert db.execute("SELECT state FROM scheduling_workload WHERE id = 1").fetchone() == (
        "cancelled",)


def test_a_legal_transition_passes(db: sqlite3.Connection) -> None:
    db.execute("UPDATE scheduling_workload SET state = 'reserved' WHERE id = 1")
    db.execute("UPDATE scheduling_workload SET state = 'running' WHERE id = 1")
    assert db.execute("SELECT state FROM scheduling_workload WHERE id = 1").fetchone() == (
        "running",)


def test_changed_or_deleted_pod_sets_clear_only_their_workloads_sum(
        db: sqlite3.Connection) -> None:
    db.execute("UPDATE scheduling_podset SET count = 3 WHERE id = 1")
    assert db.execute("SELECT gpus_total FROM scheduling_workload ORDER BY id").fetchall() == [
        (None,), (4,)]
    db.execute("DELETE FROM scheduling_podset WHERE id = 2")
    assert db.execute("SELECT gpus_total FROM scheduling_workload ORDER BY id").fetchall() == [
        (None,), (None,)]
