"""Event types of their own for a resubmission (`resubmitted`, on the new workload and on the
ended one) and for a change of a pending request (`updated`), which were `submitted` events
told apart by their code (RESUBMITTED, UPDATED); the existing ones are re-typed."""

from django.db import migrations, models

# (code, the new type)
RETYPED = (("RESUBMITTED", "resubmitted"), ("UPDATED", "updated"))


def retype(apps, schema_editor):  # type: ignore[no-untyped-def]
    events = apps.get_model("scheduling", "WorkloadEvent").objects
    for code, type_ in RETYPED:
        events.filter(type="submitted", code=code).update(type=type_)


def untype(apps, schema_editor):  # type: ignore[no-untyped-def]
    events = apps.get_model("scheduling", "WorkloadEvent").objects
    for code, type_ in RETYPED:
        events.filter(type=type_, code=code).update(type="submitted")


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0010_state_transitions_in_the_database'),
    ]

    operations = [
        migrations.AlterField(
            model_name='workloadevent',
            name='type',
            field=models.CharField(choices=[('submitted', 'Submitted'), ('resubmitted', 'Resubmitted'), ('updated', 'Updated'), ('admitted', 'Admitted'), ('dispatched', 'Dispatched'), ('refused', 'Refused by the cluster'), ('running', 'Running'), ('preempted', 'Preempted'), ('requeued', 'Requeued'), ('finished', 'Finished'), ('cancelled', 'Cancelled'), ('rejected', 'Rejected'), ('failed', 'Failed'), ('reason', 'Reason'), ('timeout', 'Timeout'), ('reclaimed', 'Reclaimed (stuck)'), ('policy', 'Policy'), ('unconfirmed', 'Not confirmed by the cluster')], max_length=16),
        ),
        migrations.RunPython(retype, untype),
    ]
