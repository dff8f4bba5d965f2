"""The transitions table (scheduling/transitions.py, ALLOWED_TRANSITIONS) enforced by the
database: an UPDATE of a workload's state to a pair the table does not allow is refused,
whatever code (or psql session) writes it.

The pairs are a frozen copy of the table as this migration was written, in the trigger. A
change of ALLOWED_TRANSITIONS needs a migration that creates the trigger again with the new
pairs: tests/integration/scheduling/test_transitions.py tries every pair of states against
the database and fails until then.

- PostgreSQL: a row trigger BEFORE UPDATE OF state, its PL/pgSQL function raising the error
  (SQLSTATE 23514, check_violation: Django raises IntegrityError) naming the workload and the
  pair.
- SQLite (`make run`): a row trigger with RAISE(ABORT) (IntegrityError too). SQLite before
  3.47 takes only a literal message, so one branch per pair of states names the pair; the
  workload is not named. SQLite rebuilds a table on most ALTERs and drops its triggers then: a
  later migration altering the workload table must create this trigger again (the test above,
  run on SQLite, fails until it does).
"""

from django.db import migrations

TRIGGER = "scheduling_workload_state_allowed"
FUNCTION = "scheduling_workload_state_allowed"

STATES = ("pending", "reserved", "running", "preempting", "finished", "cancelled", "rejected",
          "failed")
# ALLOWED_TRANSITIONS as this migration was written (a frozen copy: a migration must not
# change with the code).
PAIRS = (
    ("pending", "reserved"), ("pending", "rejected"), ("pending", "cancelled"),
    ("pending", "failed"),
    ("reserved", "running"), ("reserved", "pending"), ("reserved", "preempting"),
    ("reserved", "cancelled"), ("reserved", "finished"), ("reserved", "failed"),
    ("running", "finished"), ("running", "failed"), ("running", "preempting"),
    ("running", "cancelled"), ("running", "pending"),
    ("preempting", "pending"), ("preempting", "cancelled"), ("preempting", "finished"),
    ("preempting", "failed"),
)

# The allowed pairs as one string, "|pending>reserved|pending>rejected|...|": a move is looked
# up with one string search.
ALLOWED = "|" + "|".join(f"{a}>{b}" for a, b in PAIRS) + "|"

# PostgreSQL: the check is in the function, with no WHEN clause on the trigger: a WHEN clause
# is prepared again by every statement, and the workers write many rows one statement each,
# where that cost more than the function call.
POSTGRES_TRIGGER = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state IS DISTINCT FROM NEW.state
            AND strpos('{ALLOWED}', '|' || OLD.state || '>' || NEW.state || '|') = 0 THEN
        RAISE EXCEPTION 'workload %: % -> % is not an allowed transition', OLD.id, OLD.state,
            NEW.state USING ERRCODE = 'check_violation', TABLE = TG_TABLE_NAME,
            COLUMN = 'state';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER {TRIGGER} BEFORE UPDATE OF state ON scheduling_workload
FOR EACH ROW EXECUTE FUNCTION {FUNCTION}();
"""


def _sqlite_trigger() -> str:
    branches = "\n".join(
        f"        WHEN '{a} -> {b}' THEN RAISE(ABORT, 'workload state {a} -> {b} is not an "
        "allowed transition')"
        for a in STATES for b in STATES if a != b)
    return f"""
CREATE TRIGGER {TRIGGER} BEFORE UPDATE OF state ON scheduling_workload
FOR EACH ROW WHEN OLD.state IS NOT NEW.state
                 AND instr('{ALLOWED}', '|' || OLD.state || '>' || NEW.state || '|') = 0
BEGIN
    SELECT CASE OLD.state || ' -> ' || NEW.state
{branches}
        ELSE RAISE(ABORT, 'workload state change is not an allowed transition')
    END;
END"""


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        return
    # No parameters: the PL/pgSQL message's % signs are not placeholders.
    schema_editor.execute(POSTGRES_TRIGGER if vendor == "postgresql" else _sqlite_trigger(),
                          None)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON scheduling_workload")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    elif vendor == "sqlite":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0009_cyclemark"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
