"""API routes of capacity requests, under /api/v1/."""

from django.urls import path

from quotas.capacity import api

urlpatterns = [
    path("capacity-requests", api.CapacityRequestListApi.as_view(), name="api-capacity-list"),
    path("capacity-requests/<int:pk>", api.CapacityRequestDetailApi.as_view(),
         name="api-capacity-detail"),
    path("capacity-requests/<int:pk>/approve", api.CapacityRequestApproveApi.as_view(),
         name="api-capacity-approve"),
    path("capacity-requests/<int:pk>/deny", api.CapacityRequestDenyApi.as_view(),
         name="api-capacity-deny"),
    path("capacity-requests/<int:pk>/cancel", api.CapacityRequestCancelApi.as_view(),
         name="api-capacity-cancel"),
    path("capacity-requests/<int:pk>/comments", api.CapacityRequestCommentApi.as_view(),
         name="api-capacity-comment"),
]
