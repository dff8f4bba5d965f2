"""The SQLite trigger kept after every migrate (scheduling/sqlite_triggers.py), run on an
in-memory SQLite database holding the columns it reads."""

from __future__ import annotations

import sqlite3

import pytest

from scheduling.sqlite_triggers import sqlite_triggers


@pytest.fixture
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE scheduling_workload (id INTEGER PRIMARY KEY, state TEXT, "
                 "gpus_total DECIMAL)")
    for sql in sqlite_triggers():
        conn.execute(sql)
    for sql in sqlite_triggers():  # again: IF NOT EXISTS, as after every migrate
        conn.execute(sql)
    conn.execute("INSERT INTO scheduling_workload VALUES (1, 'pending', 8), (2, 'pending', 4)")
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
