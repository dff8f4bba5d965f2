"""Billing: rate cards, cost centers, usage records, ledger, invoices, budgets."""
