"""API tokens and users join the change log (policies 0002, core/changes.py) as topic `auth`:
a revoked token, a deactivated user or any change to what a token lookup caches is seen by the
next request in every process, as soon as it commits (PostgreSQL only; elsewhere tokens are
read on every request).

Only the columns a cached lookup carries count: `last_used_at` (written as tokens are used)
and `last_login` (written at every sign-in) do not drop the caches.
"""

from django.db import migrations

# (model, columns whose UPDATE matters)
TRACKED = [
    ("portal.ApiToken", ("key_hash", "user_id", "scope", "expires_at")),
    ("auth.User", ("username", "is_active", "is_staff", "is_superuser", "first_name",
                   "last_name", "email")),
]


def _triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    qn = schema_editor.connection.ops.quote_name
    for label, columns in TRACKED:
        model = apps.get_model(label)
        table = qn(model._meta.db_table)
        names = ", ".join(qn(model._meta.get_field(c.removesuffix("_id")).column)
                          for c in columns)
        yield table, (
            f"CREATE TRIGGER policies_change_w AFTER UPDATE OF {names} OR DELETE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('auth')",
            f"CREATE TRIGGER policies_change_t AFTER TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION policies_note_change('auth')",
        )


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, statements in _triggers(apps, schema_editor):
        for name in ("policies_change_w", "policies_change_t"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        for sql in statements:
            schema_editor.execute(sql)


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, _ in _triggers(apps, schema_editor):
        for name in ("policies_change_w", "policies_change_t"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")


class Migration(migrations.Migration):

    dependencies = [
        ("portal", "0002_token_expiry_and_scope"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("policies", "0003_change_log_once_per_transaction"),
    ]

    operations = [migrations.RunPython(forward, backward)]
