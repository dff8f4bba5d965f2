from django.apps import AppConfig


class CapacityConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "quotas.capacity"
    label = "capacity"
    verbose_name = "Capacity requests"
