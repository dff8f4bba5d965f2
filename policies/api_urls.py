"""API routes of the policies app (under /api/v1/)."""

from django.urls import path

from . import api

urlpatterns = [
    path("policies", api.PolicyList.as_view(), name="api-policies"),
    path("policies/validate", api.PolicyValidate.as_view(), name="api-policy-validate"),
    path("policies/<slug:name>", api.PolicyDetail.as_view(), name="api-policy"),
    path("policies/<slug:name>/versions", api.PolicyVersions.as_view(),
         name="api-policy-versions"),
    path("policies/<slug:name>/try", api.PolicyTry.as_view(), name="api-policy-try"),
    path("policies/<slug:name>/replay", api.PolicyReplay.as_view(), name="api-policy-replay"),
    path("policy-tests", api.PolicyTests.as_view(), name="api-policy-tests"),
    path("policy-violations", api.ViolationList.as_view(), name="api-policy-violations"),
    path("policy-approvals", api.ApprovalList.as_view(), name="api-policy-approvals"),
    path("policy-approvals/<slug:team>/<slug:name>", api.ApprovalDetail.as_view(),
         name="api-policy-approval"),
]
