"""API routes of accounts."""

from django.urls import path

from portal.api import TokenView

urlpatterns = [
    path("auth/token", TokenView.as_view(), name="api-auth-token"),
]
