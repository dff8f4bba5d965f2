"""Two fixes to the change log (0002):

- A workload's INSERT or DELETE is no usage change (its admissions' writes are, and a deleted
  workload's admissions fire their own trigger): the workload trigger is UPDATE OF queue_id
  only, so a submission does not make the next one re-read the usage.
- Pruning by insertion time could drop the row of a long transaction that committed just now
  (its `at` is its start). `seen_at` is stamped by the pruner the first time it sees a row (so
  after its commit), and rows are pruned 10 minutes after that.
"""

from django.db import migrations

SQL = """
ALTER TABLE policies_change ADD COLUMN IF NOT EXISTS seen_at timestamptz;
CREATE INDEX IF NOT EXISTS policies_change_unseen ON policies_change (id) WHERE seen_at IS NULL;
CREATE INDEX IF NOT EXISTS policies_change_seen_at ON policies_change (seen_at);
DROP INDEX IF EXISTS policies_change_at;
"""


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(SQL)
    table = schema_editor.connection.ops.quote_name(
        apps.get_model("scheduling", "Workload")._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS policies_change_w ON {table}")
    schema_editor.execute(
        f"CREATE TRIGGER policies_change_w AFTER UPDATE OF queue_id ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('usage')")
    schema_editor.execute(f"DROP TRIGGER IF EXISTS policies_change_t ON {table}")


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.connection.ops.quote_name(
        apps.get_model("scheduling", "Workload")._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS policies_change_w ON {table}")
    schema_editor.execute(
        f"CREATE TRIGGER policies_change_w AFTER INSERT OR UPDATE OF queue_id OR DELETE ON "
        f"{table} FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('usage')")
    schema_editor.execute(
        f"CREATE TRIGGER policies_change_t AFTER TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('usage')")
    schema_editor.execute("CREATE INDEX IF NOT EXISTS policies_change_at ON policies_change (at)")
    schema_editor.execute("DROP INDEX IF EXISTS policies_change_unseen")
    schema_editor.execute("DROP INDEX IF EXISTS policies_change_seen_at")
    schema_editor.execute("ALTER TABLE policies_change DROP COLUMN IF EXISTS seen_at")


class Migration(migrations.Migration):

    dependencies = [("policies", "0003_change_log_once_per_transaction")]

    operations = [migrations.RunPython(forward, backward)]
