from django.apps import AppConfig


class BillingConfig(AppConfig):
    """Billing: rate cards, cost centers, metering, ledger, invoices, budgets."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing.selectors.rates import request_cost_estimate
        from billing.services.budgets import budget_extension_check, budget_submission_check
        from scheduling.extensions import (
            register_cost_estimator,
            register_session_extension_check,
            register_submission_check,
        )

        # Budget actions in force (block, lower to batch-low) apply at submit.
        register_submission_check(budget_submission_check)
        # ... and to a session's time-limit extension (block only).
        register_session_extension_check(budget_extension_check)
        # The request form's cost estimate, counting fractions and MIG slices.
        register_cost_estimator(request_cost_estimate)
