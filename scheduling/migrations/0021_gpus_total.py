"""A workload's GPUs, summed over its pod sets (`Workload.gpus_total`), held in the pending-head
index, so that a queue position reads the GPUs ahead from the index alone (it read every
pending workload's pod sets: O(pending) lookups per submission).

The services write it with the pod sets. Pending rows get it here; the others keep NULL, read
from their pod sets as before. A trigger on the pod sets clears it when they change or go, so
a stale sum is never read (NULL falls back to the pod sets):

- PostgreSQL: statement triggers with transition tables, one UPDATE per statement (a
  workload's deletion deletes its pod sets in one statement).
- SQLite (`make run`): none. The position is read through the ORM there, from the pod sets,
  never from this column; and a trigger on the pod sets naming the workload table would break
  every later rebuild of that table (SQLite checks the triggers when it renames the new table).
"""

from django.db import migrations, models

FUNCTION = "scheduling_podset_gpus_changed"

POSTGRES = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scheduling_workload w SET gpus_total = NULL
    FROM (SELECT DISTINCT workload_id FROM changed_rows) c
    WHERE w.id = c.workload_id AND w.gpus_total IS NOT NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER {FUNCTION}_delete AFTER DELETE ON scheduling_podset
REFERENCING OLD TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}();
CREATE TRIGGER {FUNCTION}_update AFTER UPDATE ON scheduling_podset
REFERENCING OLD TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}();
"""

BACKFILL = """
UPDATE scheduling_workload SET gpus_total = (
    SELECT COALESCE(SUM(p.count * p.gpus), 0) FROM scheduling_podset p
    WHERE p.workload_id = scheduling_workload.id)
WHERE state = 'pending'
"""


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor != "postgresql":
        return
    schema_editor.execute(BACKFILL)
    schema_editor.execute(POSTGRES, None)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for op in ("delete", "update"):
            schema_editor.execute(
                f"DROP TRIGGER IF EXISTS {FUNCTION}_{op} ON scheduling_podset")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0020_trace_replay"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="workload",
            name="workload_pending_head",
        ),
        migrations.AddField(
            model_name="workload",
            name="gpus_total",
            field=models.DecimalField(blank=True, decimal_places=3, editable=False,
                                      max_digits=12, null=True),
        ),
        migrations.RunPython(install, uninstall),
        migrations.AddIndex(
            model_name="workload",
            index=models.Index(condition=models.Q(("state", "pending")),
                               fields=["queue", "priority_class", "submitted_at", "id"],
                               include=("gpus_total",), name="workload_pending_head"),
        ),
    ]
