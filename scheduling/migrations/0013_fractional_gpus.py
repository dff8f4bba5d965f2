"""Fractional GPUs (QUOTA-SEMANTICS §10): a pod set's and an admission's `gpus` are kept to the
thousandth of a card, and an admission keeps the card each fractional pod holds.

PostgreSQL cannot change the type of a column a trigger names (the change log's
`policies_change_w` on the admissions names `gpus`): the admissions' triggers are dropped
around the change and created again as they were.
"""

from decimal import Decimal

from django.db import migrations, models

SAVED: list[str] = []


def _table(apps):  # type: ignore[no-untyped-def]
    return apps.get_model("scheduling", "Admission")._meta.db_table


def drop_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    table = _table(apps)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgrelid = %s::regclass AND NOT tgisinternal ORDER BY tgname", [table])
        rows = cursor.fetchall()
    qn = schema_editor.connection.ops.quote_name
    SAVED.clear()
    for name, definition in rows:
        SAVED.append(definition)
        schema_editor.execute(f"DROP TRIGGER {qn(name)} ON {qn(table)}")


def create_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for definition in SAVED:
        schema_editor.execute(definition)
    SAVED.clear()


class Migration(migrations.Migration):

    dependencies = [
        ("scheduling", "0012_metrics_tallies"),
    ]

    operations = [
        migrations.AddField(
            model_name="admission",
            name="cards",
            field=models.JSONField(
                blank=True, default=list,
                help_text="Per pod, the card a fractional pod holds on its node (null for "
                          "others); empty when no pod is a fraction."),
        ),
        migrations.RunPython(drop_triggers, create_triggers),
        migrations.AlterField(
            model_name="admission",
            name="gpus",
            field=models.DecimalField(decimal_places=3, default=Decimal("0"), max_digits=12),
        ),
        migrations.RunPython(create_triggers, drop_triggers),
        migrations.AlterField(
            model_name="podset",
            name="gpus",
            field=models.DecimalField(decimal_places=3, default=Decimal("0"), max_digits=9),
        ),
    ]
