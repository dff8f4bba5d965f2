"""Two indexes fewer to maintain on every submission: a workload's queue and an event's workload
were indexed alone and again as the first column of `workload_queue_state` and
`event_workload_at`, which serve the same lookups. (SQLite rebuilds the tables: its triggers
are created again after the migration, scheduling/sqlite_triggers.py.)
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0004_idle_sessions'),
        ('scheduling', '0022_workload_time_limit_s_alter_admission_end_reason'),
    ]

    operations = [
        migrations.AlterField(
            model_name='workload',
            name='queue',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='workloads', to='quotas.queue'),
        ),
        migrations.AlterField(
            model_name='workloadevent',
            name='workload',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='scheduling.workload'),
        ),
    ]
