"""Change history (core/history.py): historical tables for Policy,
and one baseline row per existing object so the first recorded change has a "before"."""

import django.db.models.deletion
import simple_history.models
from django.conf import settings
from django.db import migrations, models

from core.history import baseline_rows


def baseline(apps, schema_editor):
    baseline_rows(apps, schema_editor, app_label='policies', model_names=('Policy',))


class Migration(migrations.Migration):

    dependencies = [
        ('policies', '0005_change_log_submission_tables'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='HistoricalPolicy',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('name', models.SlugField(max_length=100)),
                ('description', models.TextField(blank=True)),
                ('kind', models.CharField(choices=[('validate', 'validate (deny a request whose rule is false)'), ('limit', "limit (cap a queue's max for a key)"), ('placement', 'placement (clusters or regions a workload may use)'), ('priority', 'priority (the priority class of a request)')], max_length=16)),
                ('match', models.TextField(default='true', help_text='CEL bool: the requests (or queues, for limits) it applies to.')),
                ('rule', models.TextField(help_text='CEL: bool (validate), number (limit), list of cluster or region names (placement), priority class name (priority).')),
                ('message', models.TextField(blank=True, help_text='CEL string expression shown on a denial; name the numbers.')),
                ('key', models.CharField(blank=True, help_text='limit only: the quota key it caps, "a100-80g/gpu".', max_length=100)),
                ('mode', models.CharField(choices=[('enforce', 'enforce'), ('audit', 'audit (record, allow)'), ('off', 'off')], default='audit', max_length=16)),
                ('scope', models.JSONField(blank=True, default=list, help_text='Queue subtrees (paths) it applies to; empty = all.')),
                ('order', models.IntegerField(default=100, help_text='Evaluation order (lower first); the first priority policy wins.')),
                ('version', models.PositiveIntegerField(default=1, editable=False)),
                ('created_at', models.DateTimeField(blank=True, editable=False)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('updated_by', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical policy',
                'verbose_name_plural': 'historical policies',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.RunPython(baseline, migrations.RunPython.noop),
    ]
