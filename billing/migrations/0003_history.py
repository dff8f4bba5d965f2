"""Change history (core/history.py): historical tables for RateCard, Budget, BudgetThreshold,
and one baseline row per existing object so the first recorded change has a "before"."""

import django.core.validators
import django.db.models.deletion
import simple_history.models
from django.conf import settings
from django.db import migrations, models

from core.history import baseline_rows


def baseline(apps, schema_editor):
    baseline_rows(apps, schema_editor, app_label='billing', model_names=('RateCard', 'Budget', 'BudgetThreshold'))


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0002_invoice_line_adjusts'),
        ('quotas', '0002_history'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='HistoricalBudget',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('period', models.CharField(choices=[('weekly', 'Weekly'), ('monthly', 'Monthly')], default='monthly', max_length=8)),
                ('amount', models.DecimalField(decimal_places=2, max_digits=16, validators=[django.core.validators.MinValueValidator(0)])),
                ('currency', models.CharField(default='EUR', max_length=3)),
                ('active', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(blank=True, editable=False)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('cost_center', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='billing.costcenter')),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical budget',
                'verbose_name_plural': 'historical budgets',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.CreateModel(
            name='HistoricalBudgetThreshold',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('percent', models.PositiveIntegerField(validators=[django.core.validators.MinValueValidator(1)])),
                ('action', models.CharField(choices=[('notify', 'Notify (email and portal banner)'), ('block', 'Block new submissions'), ('lower', 'Lower new workloads to batch-low')], max_length=8)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('budget', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='billing.budget')),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical budget threshold',
                'verbose_name_plural': 'historical budget thresholds',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.CreateModel(
            name='HistoricalRateCard',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('resource', models.CharField(choices=[('gpu', 'GPU'), ('cpu', 'CPU core'), ('memory', 'Memory GiB')], max_length=16)),
                ('version', models.PositiveIntegerField()),
                ('effective_from', models.DateTimeField()),
                ('rate', models.DecimalField(decimal_places=4, help_text='Price of one unit (GPU-hour, core-hour, GiB-hour).', max_digits=12, validators=[django.core.validators.MinValueValidator(0)])),
                ('frozen_rate', models.DecimalField(blank=True, decimal_places=4, help_text='Price of one unit held frozen (reserved, pods not running); empty = rate.', max_digits=12, null=True, validators=[django.core.validators.MinValueValidator(0)])),
                ('unit', models.CharField(max_length=16)),
                ('currency', models.CharField(default='EUR', max_length=3)),
                ('note', models.CharField(blank=True, max_length=200)),
                ('created_at', models.DateTimeField(blank=True, editable=False)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('created_by', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('flavor', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quotas.flavor')),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical rate card',
                'verbose_name_plural': 'historical rate cards',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.RunPython(baseline, migrations.RunPython.noop),
    ]
