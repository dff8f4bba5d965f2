"""Seed the default priority classes (QUOTA-SEMANTICS.md §5)."""

from django.db import migrations

DEFAULTS = [
    ("inference-high", 10000, True, "Latency-bound serving; may preempt lower classes in its queue."),
    ("training", 1000, False, "Default for training jobs."),
    ("batch-low", 100, False, "Best-effort batch work."),
]


def seed(apps, schema_editor):
    PriorityClass = apps.get_model("scheduling", "PriorityClass")
    for name, value, can_preempt, description in DEFAULTS:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={"value": value, "can_preempt": can_preempt, "description": description},
        )


def unseed(apps, schema_editor):
    PriorityClass = apps.get_model("scheduling", "PriorityClass")
    PriorityClass.objects.filter(name__in=[d[0] for d in DEFAULTS], workloads__isnull=True).delete()


class Migration(migrations.Migration):

    dependencies = [("scheduling", "0002_workloads")]

    operations = [migrations.RunPython(seed, unseed)]
