"""Billing reads: usage and cost per group, workload and team costs, budgets, chart series.

Researchers see their teams' costs only: every selector that returns money takes the viewer (or
a team) and narrows to `visible_team_ids` (`access`).

Callers import from here (`from billing import selectors`); policies looks `cost_center_of` and
`budget_forecast` up on this module by name.
"""

from billing.selectors.access import (
    is_admin,
    visible_budgets,
    visible_invoices,
    visible_team_ids,
    visible_workload,
)
from billing.selectors.budgets import (
    budget_banner,
    budget_forecast,
    budget_status,
    team_month_to_date,
)
from billing.selectors.cost_centers import cost_center_of, default_currency
from billing.selectors.rates import rate_cards
from billing.selectors.reconciliation import latest_reconciliation
from billing.selectors.series import (
    budget_burndown,
    gpu_hours_daily,
    idle_capacity_cost,
    spend_by_team_daily,
    top_workloads,
)
from billing.selectors.usage import GROUPS, usage_summary
from billing.selectors.workloads import workload_charges, workload_cost, workload_utilisation

__all__ = [
    "GROUPS", "budget_banner", "budget_burndown", "budget_forecast", "budget_status",
    "cost_center_of", "default_currency", "gpu_hours_daily", "idle_capacity_cost", "is_admin",
    "latest_reconciliation", "rate_cards", "spend_by_team_daily", "team_month_to_date",
    "top_workloads", "usage_summary", "visible_budgets", "visible_invoices", "visible_team_ids",
    "visible_workload", "workload_charges", "workload_cost", "workload_utilisation",
]
