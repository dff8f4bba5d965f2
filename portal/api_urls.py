"""API routes of accounts."""

from django.urls import path

from portal import lists_api
from portal.api import TokenDetail, TokenList, TokenView

urlpatterns = [
    path("auth/token", TokenView.as_view(), name="api-auth-token"),
    path("auth/tokens", TokenList.as_view(), name="api-auth-tokens"),
    path("auth/tokens/<int:pk>", TokenDetail.as_view(), name="api-auth-token-detail"),
    # Before quotas' `queues/<path>`, which would take the path's last part for a queue's.
    path("queues/<path:path>/pending", lists_api.QueuePendingApi.as_view(),
         name="api-queue-pending"),
    path("workloads/<int:pk>/utilisation", lists_api.WorkloadUtilisationApi.as_view(),
         name="api-workload-utilisation"),
    path("borrowing", lists_api.BorrowingApi.as_view(), name="api-borrowing"),
    path("search", lists_api.SearchApi.as_view(), name="api-search"),
    path("notifications", lists_api.NotificationsApi.as_view(), name="api-notifications"),
    path("notifications/read", lists_api.NotificationsReadApi.as_view(),
         name="api-notifications-read"),
    path("account/settings", lists_api.AccountSettingsApi.as_view(), name="api-account-settings"),
]
