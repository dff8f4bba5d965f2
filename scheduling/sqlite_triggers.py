"""The scheduling tables' triggers on SQLite (`make run`), kept after every migration.

SQLite rebuilds a table for most schema changes and drops the table's triggers with it: the
workload table's state trigger (migration 0010: a state change the transitions table does not
allow is refused) was lost that way by later migrations that altered the table. After every
`migrate` the triggers below are created again where missing (`CREATE TRIGGER IF NOT EXISTS`),
whatever a migration rebuilt. PostgreSQL keeps its triggers through ALTER TABLE: its own are
the migrations'.

- `scheduling_workload_state_allowed`: the pairs of scheduling/transitions.py
  (ALLOWED_TRANSITIONS), as the code enforces them.
- `scheduling_podset_gpus_changed_*` (migration 0021): a workload's `gpus_total` is cleared
  when its pod sets change or go.
"""

from __future__ import annotations

from typing import Any

from scheduling.models import WorkloadState
from scheduling.transitions import ALLOWED_TRANSITIONS

STATE_TRIGGER = "scheduling_workload_state_allowed"
PODSET_TRIGGER = "scheduling_podset_gpus_changed"


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
    clear = """
BEGIN
    UPDATE scheduling_workload SET gpus_total = NULL
    WHERE id = OLD.workload_id AND gpus_total IS NOT NULL;
END"""
    return [
        _state_trigger(),
        f"CREATE TRIGGER IF NOT EXISTS {PODSET_TRIGGER}_delete AFTER DELETE ON "
        f"scheduling_podset FOR EACH ROW{clear}",
        f"CREATE TRIGGER IF NOT EXISTS {PODSET_TRIGGER}_update AFTER UPDATE OF count, gpus, "
        f"workload_id ON scheduling_podset FOR EACH ROW{clear}",
    ]


def ensure_sqlite_triggers(*, using: str = "default", **_: Any) -> None:
    """post_migrate: create the missing triggers (SQLite only; nothing elsewhere)."""
    from django.db import connections

    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    tables = set(connection.introspection.table_names())
    if not {"scheduling_workload", "scheduling_podset"} <= tables:
        return
    columns = {c.name for c in connection.introspection.get_table_description(
        connection.cursor(), "scheduling_workload")}
    if "gpus_total" not in columns:  # migrated part of the way: 0021 creates them
        return
    with connection.cursor() as cursor:
        for sql in sqlite_triggers():
            cursor.execute(sql)
