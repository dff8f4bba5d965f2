"""Billing: rate cards, cost centers, hourly usage records, the chained ledger, invoices, budgets.

Rounding (stated once, applied everywhere) is in `rounding`: quantities to 4 decimal places,
money to cents, both ROUND_HALF_EVEN; an amount is `round(round4(quantity) * rate, 2)`.

Records that finance relies on (usage records, ledger entries, invoice lines) keep plain ids and
names of workloads, queues and flavors rather than foreign keys: deleting a workload or renaming
a queue must never rewrite or cascade into what was billed.

Every model is imported here. The modules are imported in dependency order, not sorted: it is
the order the app registers its models in (content types, `get_models()`).
"""

# isort: skip_file

from billing.models.rounding import MONEY_PLACES, QUANTITY_PLACES, round_money, round_quantity
from billing.models.cost_centers import ChargeBasis, CostCenter, TeamCostCenter
from billing.models.rates import SLICE_UNIT, UNITS, BillableResource, RateCard
from billing.models.usage import OrphanTelemetry, Phase, UsageRecord
from billing.models.ledger import ChargeKind, LedgerEntry, LedgerHead, LedgerVerification
from billing.models.invoices import (
    Invoice,
    InvoiceLine,
    InvoiceState,
    InvoiceWorkloadLine,
)
from billing.models.budgets import (
    Budget,
    BudgetAction,
    BudgetFiring,
    BudgetPeriod,
    BudgetThreshold,
)
from billing.models.reconciliation import (
    FindingKind,
    ReconciliationFinding,
    ReconciliationRun,
)

__all__ = [
    "MONEY_PLACES", "QUANTITY_PLACES", "SLICE_UNIT", "UNITS", "BillableResource", "Budget",
    "BudgetAction", "BudgetFiring", "BudgetPeriod", "BudgetThreshold", "ChargeBasis",
    "ChargeKind", "CostCenter",
    "FindingKind", "Invoice", "InvoiceLine", "InvoiceState", "InvoiceWorkloadLine", "LedgerEntry",
    "LedgerHead", "LedgerVerification", "OrphanTelemetry", "Phase", "RateCard",
    "ReconciliationFinding", "ReconciliationRun", "TeamCostCenter", "UsageRecord", "round_money",
    "round_quantity",
]
