"""The change log behind the policy caches (PostgreSQL only; other databases read every time).

Statement-level triggers on the tables that the policies and their context read append one row
(topic, the writing transaction's id) per writing transaction and topic: an insert only, so no
writer ever waits for another. A reader that cached something together with the snapshot it
read it in asks "did a transaction not visible in that snapshot write this topic?" (see
core/changes.py): a change is seen by the next read in every process as soon as it
commits, and a rolled-back change leaves no row.
"""

from django.db import migrations

# (model, topics, columns whose UPDATE matters; None: any UPDATE)
TRACKED = [
    ("policies.Policy", ("policy",),
     ("name", "description", "kind", "match", "rule", "message", "key", "mode", "scope",
      "order", "version")),
    ("policies.TeamApproval", ("config",), None),
    ("quotas.Queue", ("config", "usage"), None),
    ("quotas.QuotaEntry", ("config",), None),
    ("quotas.Team", ("config",), None),
    ("quotas.Flavor", ("config",), None),
    ("scheduling.Cluster", ("config",), ("name", "region", "kind", "health", "enabled")),
    ("scheduling.Node", ("config",),
     ("cluster_id", "flavor_id", "gpus", "cpu", "memory_gib", "ready")),
    ("scheduling.Admission", ("usage",),
     ("workload_id", "flavor_id", "gpus", "cpu", "memory_gib", "ended_at")),
    ("scheduling.Workload", ("usage",), ("queue_id",)),
    ("billing.CostCenter", ("config",), ("code", "currency", "is_default")),
    ("billing.TeamCostCenter", ("config",), None),
]

CREATE = """
CREATE TABLE IF NOT EXISTS policies_change (
    id bigserial PRIMARY KEY,
    topic text NOT NULL,
    xid xid8 NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (xid, topic)
);
CREATE INDEX IF NOT EXISTS policies_change_topic_xid ON policies_change (topic, xid);
CREATE INDEX IF NOT EXISTS policies_change_at ON policies_change (at);
CREATE OR REPLACE FUNCTION policies_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY TG_ARGV LOOP
        INSERT INTO policies_change (topic, xid) VALUES (t, pg_current_xact_id())
        ON CONFLICT (xid, topic) DO NOTHING;
    END LOOP;
    RETURN NULL;
END
$$;
-- The check (core/changes.py): the current snapshot, the topics written by
-- transactions `since` did not see, and those the current transaction wrote. STABLE: one
-- snapshot for all three; generic plans: no planning per call.
CREATE OR REPLACE FUNCTION policies_changes_since(since pg_snapshot)
RETURNS TABLE (snapshot text, changed text[], own text[])
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    snapshot := pg_current_snapshot()::text;
    changed := ARRAY(SELECT DISTINCT c.topic FROM policies_change c
                     WHERE c.xid >= pg_snapshot_xmin(since)
                     AND NOT pg_visible_in_snapshot(c.xid, since));
    own := ARRAY(SELECT DISTINCT c.topic FROM policies_change c
                 WHERE c.xid = pg_current_xact_id_if_assigned());
    RETURN NEXT;
END
$$;
"""


def _triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    qn = schema_editor.connection.ops.quote_name
    for label, topics, columns in TRACKED:
        try:
            model = apps.get_model(label)
        except LookupError:  # an optional app (billing) not installed
            continue
        table = model._meta.db_table
        args = ", ".join(f"'{t}'" for t in topics)
        if columns:
            names = ", ".join(qn(model._meta.get_field(c.removesuffix("_id")).column)
                              for c in columns)
            update = f"UPDATE OF {names}"
        else:
            update = "UPDATE"
        yield table, (
            f"CREATE TRIGGER policies_change_w AFTER INSERT OR {update} OR DELETE ON {qn(table)} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change({args})",
            f"CREATE TRIGGER policies_change_t AFTER TRUNCATE ON {qn(table)} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change({args})",
        )


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(CREATE)
    qn = schema_editor.connection.ops.quote_name
    for table, statements in _triggers(apps, schema_editor):
        for name in ("policies_change_w", "policies_change_t"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {qn(table)}")
        for sql in statements:
            schema_editor.execute(sql)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    qn = schema_editor.connection.ops.quote_name
    for table, _ in _triggers(apps, schema_editor):
        for name in ("policies_change_w", "policies_change_t"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {qn(table)}")
    schema_editor.execute("DROP FUNCTION IF EXISTS policies_note_change()")
    schema_editor.execute("DROP FUNCTION IF EXISTS policies_changes_since(pg_snapshot)")
    schema_editor.execute("DROP TABLE IF EXISTS policies_change")


class Migration(migrations.Migration):

    dependencies = [
        ("policies", "0001_initial"),
        ("quotas", "0001_initial"),
        ("scheduling", "0002_workloads"),
        ("billing", "0002_invoice_line_adjusts"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
