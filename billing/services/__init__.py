"""Billing services (writes): metering, pricing, ledger, invoices, budgets, reconciliation."""

from billing.services.budgets import (
    budget_create,
    budget_submission_check,
    budgets_evaluate,
)
from billing.services.invoices import invoice_issue
from billing.services.ledger import ledger_append, ledger_verify
from billing.services.rates import cost_center_create, rate_card_create, team_cost_center_set
from billing.services.reconciliation import reconciliation_run
from billing.services.usage import charges_post_hour, rollup_and_post, usage_rollup_hour
from billing.services.verification import ledger_check

__all__ = [
    "budget_create", "budget_submission_check", "budgets_evaluate", "charges_post_hour",
    "cost_center_create", "invoice_issue", "ledger_append", "ledger_check", "ledger_verify",
    "rate_card_create", "reconciliation_run", "rollup_and_post", "team_cost_center_set",
    "usage_rollup_hour",
]
