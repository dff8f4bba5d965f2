"""Change history (core/history.py): historical tables for Flavor, Queue, QuotaEntry,
and one baseline row per existing object so the first recorded change has a "before"."""

import django.core.validators
import django.db.models.deletion
import simple_history.models
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models

from core.history import baseline_rows


def baseline(apps, schema_editor):
    baseline_rows(apps, schema_editor, app_label='quotas', model_names=('Flavor', 'Queue', 'QuotaEntry'))


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='HistoricalFlavor',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('name', models.SlugField(max_length=63)),
                ('node_selector', models.JSONField(blank=True, default=dict, help_text="Node labels that select this flavor's nodes.")),
                ('gpu_memory_gib', models.PositiveIntegerField(blank=True, help_text='GPU memory per card in GiB; empty for CPU-only nodes.', null=True)),
                ('interconnect_label', models.CharField(blank=True, help_text='Node label naming the interconnect domain (rack).', max_length=253)),
                ('mig_profiles', models.JSONField(blank=True, default=list)),
                ('notes', models.TextField(blank=True)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical flavor',
                'verbose_name_plural': 'historical flavors',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.CreateModel(
            name='HistoricalQueue',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('name', models.SlugField(max_length=63)),
                ('path', models.CharField(db_index=True, editable=False, max_length=512)),
                ('depth', models.PositiveSmallIntegerField(default=1, editable=False)),
                ('strategy', models.CharField(blank=True, choices=[('binpack', 'binpack (fill one cluster first)'), ('spread', 'spread (spread across clusters)')], help_text="Default placement strategy; empty inherits the parent's or the setting.", max_length=16)),
                ('namespace', models.CharField(blank=True, help_text='Kubernetes namespace a leaf maps to.', max_length=63)),
                ('description', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(blank=True, editable=False)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('parent', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quotas.queue')),
            ],
            options={
                'verbose_name': 'historical queue',
                'verbose_name_plural': 'historical queues',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.CreateModel(
            name='HistoricalQuotaEntry',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('resource', models.CharField(choices=[('gpu', 'GPU (whole cards)'), ('cpu', 'CPU (cores)'), ('memory', 'Memory (GiB)')], default='gpu', max_length=16)),
                ('min', models.DecimalField(decimal_places=3, default=Decimal('0'), max_digits=14, validators=[django.core.validators.MinValueValidator(0)])),
                ('max', models.DecimalField(blank=True, decimal_places=3, help_text="Empty: the parent's max (or unlimited).", max_digits=14, null=True, validators=[django.core.validators.MinValueValidator(0)])),
                ('lendable', models.DecimalField(blank=True, decimal_places=3, help_text='Empty: all of min may be lent.', max_digits=14, null=True, validators=[django.core.validators.MinValueValidator(0)])),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('flavor', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quotas.flavor')),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('queue', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quotas.queue')),
            ],
            options={
                'verbose_name': 'historical quota entry',
                'verbose_name_plural': 'historical quota entries',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.RunPython(baseline, migrations.RunPython.noop),
    ]
