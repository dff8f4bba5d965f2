from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "scheduling"
    verbose_name = "Scheduling and clusters"

    def ready(self) -> None:
        """Register the Celery tasks in every process (`scheduling.enqueue` queues by name),
        and the SQLite triggers' keeper."""
        from django.db.models.signals import post_migrate

        from scheduling import tasks  # noqa: F401
        from scheduling.sqlite_triggers import ensure_sqlite_triggers

        # SQLite drops a table's triggers when a migration rebuilds it: created again after
        # every migrate (scheduling/sqlite_triggers.py).
        post_migrate.connect(ensure_sqlite_triggers, sender=self,
                             dispatch_uid="scheduling-sqlite-triggers")
