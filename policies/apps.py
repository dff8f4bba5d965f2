from django.apps import AppConfig


class PoliciesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "policies"
    label = "policies"
    verbose_name = "Policies (CEL)"

    def ready(self) -> None:
        from .hooks import register

        register()
