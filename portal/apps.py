from django.apps import AppConfig


class PortalConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "portal"
    verbose_name = "Portal and accounts"

    def ready(self) -> None:
        from portal import checks  # noqa: F401 (registers the deployment checks)
        from portal.login_limits import connect_signals

        connect_signals()
        from portal.notifications import workload_events_told
        from scheduling.extensions import register_event_listener

        register_event_listener(workload_events_told)
