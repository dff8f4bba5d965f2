"""Billing API under /api/v1/."""

from django.urls import URLPattern, URLResolver, path

from billing import api
from billing.recommend import api as recommend_api

urlpatterns: list[URLPattern | URLResolver] = [
    path("usage", api.UsageView.as_view(), name="api-usage"),
    path("usage/workloads/<int:pk>", api.WorkloadCostView.as_view(), name="api-workload-cost"),
    path("invoices", api.InvoiceListView.as_view(), name="api-invoices"),
    path("invoices/<int:pk>", api.InvoiceDetailView.as_view(), name="api-invoice"),
    path("budgets", api.BudgetListView.as_view(), name="api-budgets"),
    path("rates", api.RateListView.as_view(), name="api-rates"),
    path("recommendations", recommend_api.RecommendationsApi.as_view(),
         name="api-recommendations"),
    path("recommendations/file", recommend_api.RecommendationFileApi.as_view(),
         name="api-recommendation-file"),
    path("recommendations/replay", recommend_api.RecommendationsReplayApi.as_view(),
         name="api-recommendations-replay"),
]
