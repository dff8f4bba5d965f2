"""Billing API under /api/v1/."""

from django.urls import URLPattern, URLResolver, path

from billing import api

urlpatterns: list[URLPattern | URLResolver] = [
    path("usage", api.UsageView.as_view(), name="api-usage"),
    path("usage/workloads/<int:pk>", api.WorkloadCostView.as_view(), name="api-workload-cost"),
    path("invoices", api.InvoiceListView.as_view(), name="api-invoices"),
    path("invoices/<int:pk>", api.InvoiceDetailView.as_view(), name="api-invoice"),
    path("budgets", api.BudgetListView.as_view(), name="api-budgets"),
    path("rates", api.RateListView.as_view(), name="api-rates"),
]
