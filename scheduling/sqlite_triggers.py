"""The scheduling tables' triggers on SQLite (`make run`), kept after every migration.

SQLite rebuilds a table for most schema changes and drops the table's triggers with it: the
workload table's state trigger (migration 0010: a state change the transitions table does not
allow is refused) was lost that way by later migrations that altered the table. After every
`migrate` the triggers below are created again where missing (`CREATE TRIGGER IF NOT EXISTS`),
whatever a migration rebuilt. PostgreSQL keeps its triggers through ALTER TABLE: its own are
the migrations'.

`scheduling_workload_state_allowed`: the pairs of scheduling/transitions.py
(ALLOWED_TRANSITIONS), as the code enforces them. (No trigger on one table may name another:
SQLite checks the triggers when a rebuild renames the new table, and the rename would fail
while the other table is being rebuilt. `gpus_total`'s trigger is PostgreSQL's only: on SQLite
the position reads the pod sets.)
"""

from __future__ import annotations

from typing import Any

from scheduling.models import WorkloadState
from scheduling.transitions import ALLOWED_TRANSITIONS

STATE_TRIGGER = "scheduling_workload_state_allowed"


def _state_trigger() -> str:
    states = [str(s) for s in WorkloadState]
    allowed = "|" + "|".join(f"{a}>{b}" for a in states
                             for b in sorted(ALLOWED_TRANSITIONS.get(a, ()))) + "|"
    # SQLite before 3.47 takes only a literal message: one branch per pair names the pair.
    branches = "\n".join(
        f"        WHEN '{a} -> {b}' THEN RAISE(ABORT, 'workload state {a} -> {b} is not an "
        "allowed transition')"
        for a in states for b in states if a != b)
    return f"""
CREATE TRIGGER IF NOT EXISTS {STATE_TRIGGER} BEFORE UPDATE OF state ON scheduling_workload
FOR EACH ROW WHEN OLD.state IS NOT NEW.state
                 AND instr('{allowed}', '|' || OLD.state || '>' || NEW.state || '|') = 0
BEGIN
    SELECT CASE OLD.state || ' -> ' || NEW.state
{branches}
        ELSE RAISE(ABORT, 'workload state change is not an allowed transition')
    END;
END"""


def sqlite_triggers() -> list[str]:
    """The statements creating every trigger that is missing."""
    return [_state_trigger()]


def ensure_sqlite_triggers(*, using: str = "default", **_: Any) -> None:
    """post_migrate: create the missing triggers (SQLite only; nothing elsewhere)."""
    from django.db import connections

    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    if "scheduling_workload" not in connection.introspection.table_names():
        return
    with connection.cursor() as cursor:
        for sql in sqlite_triggers():
            cursor.execute(sql)
