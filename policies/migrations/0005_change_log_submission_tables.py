"""The change log (0002) also covers what a submission reads besides the policies' context, so
the submission can cache it too (PostgreSQL only):

- `config`: team memberships, the team-queue grants and the priority classes (with the
  queues, quota entries, flavors, clusters and nodes already tracked, everything the
  submission's lookups and the engine's impossibility check read);
- `budget`: budgets, their thresholds and their firings (whether a budget action is in force);
- a node's rack and name are `config` too (the impossibility check places gangs by rack).
"""

from django.db import migrations

# (model label or (model label, many-to-many field), topic)
TRACKED = [
    ("quotas.TeamMembership", "config"),
    (("quotas.Team", "queues"), "config"),
    ("scheduling.PriorityClass", "config"),
    ("billing.Budget", "budget"),
    ("billing.BudgetThreshold", "budget"),
    ("billing.BudgetFiring", "budget"),
]


def _tables(apps):  # type: ignore[no-untyped-def]
    for label, topic in TRACKED:
        try:
            if isinstance(label, tuple):
                model = apps.get_model(label[0])._meta.get_field(label[1]).remote_field.through
            else:
                model = apps.get_model(label)
        except LookupError:  # an optional app (billing) not installed
            continue
        yield model._meta.db_table, topic


NODE_COLUMNS = ("cluster_id", "flavor_id", "gpus", "cpu", "memory_gib", "ready")


def _node_trigger(apps, schema_editor, columns):  # type: ignore[no-untyped-def]
    qn = schema_editor.connection.ops.quote_name
    model = apps.get_model("scheduling", "Node")
    names = ", ".join(qn(model._meta.get_field(c.removesuffix("_id")).column) for c in columns)
    table = qn(model._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS policies_change_w ON {table}")
    schema_editor.execute(
        f"CREATE TRIGGER policies_change_w AFTER INSERT OR UPDATE OF {names} OR DELETE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('config')")


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    qn = schema_editor.connection.ops.quote_name
    _node_trigger(apps, schema_editor, (*NODE_COLUMNS, "rack", "name"))
    for table, topic in _tables(apps):
        for name in ("policies_change_w", "policies_change_t"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {qn(table)}")
        schema_editor.execute(
            f"CREATE TRIGGER policies_change_w AFTER INSERT OR UPDATE OR DELETE ON {qn(table)} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('{topic}')")
        schema_editor.execute(
            f"CREATE TRIGGER policies_change_t AFTER TRUNCATE ON {qn(table)} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('{topic}')")


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    qn = schema_editor.connection.ops.quote_name
    _node_trigger(apps, schema_editor, NODE_COLUMNS)
    for table, _ in _tables(apps):
        for name in ("policies_change_w", "policies_change_t"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {qn(table)}")


class Migration(migrations.Migration):

    dependencies = [
        ("policies", "0004_change_log_prune_after_seen"),
        ("quotas", "0001_initial"),
        ("scheduling", "0005_workload_newest_first_index"),
        ("billing", "0002_invoice_line_adjusts"),
    ]

    operations = [migrations.RunPython(forward, backward)]
