"""API route of the change history, under /api/v1/."""

from django.urls import path

from portal.history import api

urlpatterns = [
    path("history", api.HistoryList.as_view(), name="api-history"),
]
