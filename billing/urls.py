"""Billing pages."""

from django.urls import URLPattern, URLResolver, path

from billing import views
from billing.recommend import views as recommend_views

urlpatterns: list[URLPattern | URLResolver] = [
    path("billing/", views.overview, name="billing-overview"),
    path("billing/invoices/", views.invoice_list, name="billing-invoices"),
    path("billing/invoices/<int:pk>/", views.invoice_detail, name="billing-invoice"),
    path("billing/invoices/<int:pk>.<str:fmt>", views.invoice_download,
         name="billing-invoice-download"),
    path("billing/reconciliation/", views.reconciliation, name="billing-reconciliation"),
    path("billing/rates/", views.rates, name="billing-rates"),
    path("billing/workloads/<int:workload_id>/", views.workload_costs,
         name="billing-workload"),
    path("planner/recommendations/", recommend_views.recommendations_page,
         name="recommendations"),
    path("planner/recommendations/file/", recommend_views.recommendation_file_view,
         name="recommendation-file"),
    path("planner/recommendations/replay/", recommend_views.recommendations_replay_view,
         name="recommendations-replay"),
]
