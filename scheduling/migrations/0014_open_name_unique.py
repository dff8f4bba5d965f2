"""A workload's name is unique among the open workloads of its queue: open duplicates already
there keep their first holder's name, the later ones get `-<id>` appended (cut to 63)."""

from django.db import migrations, models


def rename_open_duplicates(apps, schema_editor):
    Workload = apps.get_model("scheduling", "Workload")
    open_states = ["pending", "reserved", "running", "preempting"]
    seen = set()
    for pk, queue_id, name in (Workload.objects.filter(state__in=open_states)
                               .order_by("submitted_at", "id")
                               .values_list("pk", "queue_id", "name")):
        if (queue_id, name) in seen:
            suffix = f"-{pk}"
            Workload.objects.filter(pk=pk).update(name=name[:63 - len(suffix)] + suffix)
        else:
            seen.add((queue_id, name))


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0013_fractional_gpus'),
    ]

    operations = [
        migrations.RunPython(rename_open_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='workload',
            constraint=models.UniqueConstraint(
                condition=models.Q(('state__in', ['pending', 'reserved', 'running', 'preempting'])),
                fields=('queue', 'name'), name='workload_open_name_in_queue'),
        ),
    ]
