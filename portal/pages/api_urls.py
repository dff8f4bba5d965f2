"""API routes of the approval inbox, under /api/v1/."""

from django.urls import path

from portal.pages import api

urlpatterns = [
    path("approvals", api.ApprovalInboxApi.as_view(), name="api-approvals"),
    path("workloads/<int:pk>/approve", api.WorkloadApproveApi.as_view(),
         name="api-workload-approve"),
    path("workloads/<int:pk>/deny", api.WorkloadDenyApi.as_view(), name="api-workload-deny"),
]
