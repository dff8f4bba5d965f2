"""API routes of accounts."""

from django.urls import path

from portal.api import TokenDetail, TokenList, TokenView

urlpatterns = [
    path("auth/token", TokenView.as_view(), name="api-auth-token"),
    path("auth/tokens", TokenList.as_view(), name="api-auth-tokens"),
    path("auth/tokens/<int:pk>", TokenDetail.as_view(), name="api-auth-token-detail"),
]
