"""Pages of the policies app."""

from django.urls import path

from . import views

urlpatterns = [
    path("policies/", views.policy_list, name="policy-list"),
    path("policies/new/", views.policy_new, name="policy-new"),
    path("policies/validate/", views.policy_validate, name="policy-validate"),
    path("policies/try/", views.policy_try, name="policy-try-new"),
    path("policies/violations/", views.violation_list, name="policy-violations"),
    path("policies/<slug:name>/", views.policy_edit, name="policy-edit"),
    path("policies/<slug:name>/try/", views.policy_try, name="policy-try"),
    path("policies/<slug:name>/replay/", views.policy_replay, name="policy-replay"),
    path("policies/<slug:name>/delete/", views.policy_delete, name="policy-delete"),
]
