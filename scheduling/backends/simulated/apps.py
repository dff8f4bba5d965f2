from django.apps import AppConfig


class SimulatedConfig(AppConfig):
    """Simulated clusters: jobs, controls and events in the database, a DCGM exporter."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "scheduling.backends.simulated"
    label = "simulated"
    verbose_name = "Simulated clusters"
