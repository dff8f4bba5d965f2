from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "scheduling"
    verbose_name = "Scheduling and clusters"

    def ready(self) -> None:
        """Register the Celery tasks in every process: `scheduling.enqueue` queues by name."""
        from scheduling import tasks  # noqa: F401
