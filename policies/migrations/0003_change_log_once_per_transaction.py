"""The change-log trigger writes one row per transaction and topic without probing the table:
a transaction-local setting remembers what it already noted (bulk writers such as the cycle's
pipelined UPDATEs fire the statement trigger once per statement)."""

from django.db import migrations

NOTE = """
CREATE OR REPLACE FUNCTION policies_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
    me text := pg_current_xact_id()::text;
BEGIN
    FOREACH t IN ARRAY TG_ARGV LOOP
        CONTINUE WHEN current_setting('policies.noted_' || t, true) = me;
        INSERT INTO policies_change (topic, xid) VALUES (t, me::xid8)
        ON CONFLICT (xid, topic) DO NOTHING;
        PERFORM set_config('policies.noted_' || t, me, true);
    END LOOP;
    RETURN NULL;
END
$$;
"""

PREVIOUS = """
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
"""


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(NOTE)


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PREVIOUS)


class Migration(migrations.Migration):

    dependencies = [("policies", "0002_change_log")]

    operations = [migrations.RunPython(forward, backward)]
