"""Change history (core/history.py): historical tables for Cluster, Node,
and one baseline row per existing object so the first recorded change has a "before"."""

import django.core.validators
import django.db.models.deletion
import simple_history.models
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models

from core.history import baseline_rows


def baseline(apps, schema_editor):
    baseline_rows(apps, schema_editor, app_label='scheduling', model_names=('Cluster', 'Node'))


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0002_history'),
        ('scheduling', '0005_workload_newest_first_index'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='HistoricalCluster',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('name', models.SlugField(max_length=63)),
                ('region', models.CharField(blank=True, max_length=63)),
                ('kind', models.CharField(choices=[('on-prem', 'On-premises'), ('cloud', 'Cloud')], default='on-prem', max_length=16)),
                ('backend', models.CharField(choices=[('simulated', 'Simulated'), ('kubernetes', 'Kubernetes')], default='simulated', max_length=16)),
                ('connection', models.JSONField(blank=True, default=dict, help_text='How to reach it: {"kubeconfig": "...", "context": "..."} or {"in_cluster": true} for Kubernetes; {"speedup": 60} for simulated.')),
                ('health', models.FloatField(default=1.0, validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(1.0)])),
                ('price', models.DecimalField(decimal_places=3, default=Decimal('1.000'), help_text='Relative price (cost term of the score).', max_digits=8, validators=[django.core.validators.MinValueValidator(0)])),
                ('datasets', models.JSONField(blank=True, default=list, help_text='Datasets cached here.')),
                ('enabled', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(blank=True, editable=False)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical cluster',
                'verbose_name_plural': 'historical clusters',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.CreateModel(
            name='HistoricalNode',
            fields=[
                ('id', models.BigIntegerField(auto_created=True, blank=True, db_index=True, verbose_name='ID')),
                ('history_source', models.CharField(choices=[('admin', 'admin'), ('api', 'API'), ('page', 'portal page'), ('import', 'import'), ('capacity_request', 'capacity request'), ('sync', 'cluster sync'), ('system', 'system')], default='system', help_text='admin, api, page, import, capacity_request, sync or system.', max_length=16)),
                ('name', models.CharField(max_length=253)),
                ('gpus', models.PositiveIntegerField(default=0)),
                ('cpu', models.DecimalField(decimal_places=3, default=Decimal('0'), max_digits=10)),
                ('memory_gib', models.DecimalField(decimal_places=3, default=Decimal('0'), max_digits=12)),
                ('rack', models.CharField(blank=True, max_length=63)),
                ('ready', models.BooleanField(default=True)),
                ('labels', models.JSONField(blank=True, default=dict)),
                ('history_id', models.AutoField(primary_key=True, serialize=False)),
                ('history_date', models.DateTimeField(db_index=True)),
                ('history_change_reason', models.CharField(max_length=100, null=True)),
                ('history_type', models.CharField(choices=[('+', 'Created'), ('~', 'Changed'), ('-', 'Deleted')], max_length=1)),
                ('cluster', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='scheduling.cluster')),
                ('flavor', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='quotas.flavor')),
                ('history_user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'historical node',
                'verbose_name_plural': 'historical nodes',
                'ordering': ('-history_date', '-history_id'),
                'get_latest_by': ('history_date', 'history_id'),
            },
            bases=(simple_history.models.HistoricalChanges, models.Model),
        ),
        migrations.RunPython(baseline, migrations.RunPython.noop),
    ]
