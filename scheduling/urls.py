"""Workload pages."""

from django.urls import path

from scheduling import admission_views, api_updates, manifest_views, views
from scheduling.planner import views as planner_views
from scheduling.whatif import views as whatif_views

urlpatterns = [
    path("workloads/", views.workload_list, name="workload-list"),
    path("workloads/new/", views.workload_new, name="workload-new"),
    path("workloads/new/check/", views.workload_check, name="workload-check"),
    path("workloads/new/manifest/", manifest_views.workload_new_manifest,
         name="workload-new-manifest"),
    path("workloads/new/manifest/check/", manifest_views.workload_check_manifest,
         name="workload-check-manifest"),
    path("k8s/admission/<slug:cluster>/<str:token>/", admission_views.admission_webhook,
         name="admission-webhook"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload-detail"),
    path("workloads/<int:pk>/live/", views.workload_live, name="workload-live"),
    path("workloads/<int:pk>/cancel/", views.workload_cancel, name="workload-cancel"),
    path("workloads/<int:pk>/resubmit/", api_updates.workload_resubmit_page,
         name="workload-resubmit"),
    path("workloads/<int:pk>/extend/", api_updates.workload_extend_page,
         name="workload-extend"),
    path("what-if/", whatif_views.what_if_page, name="what-if"),
    path("what-if/<int:pk>/", whatif_views.what_if_detail, name="what-if-detail"),
    path("what-if/<int:pk>/scenario.json", whatif_views.what_if_download,
         name="what-if-download"),
    path("planner/replay/", planner_views.trace_replay_page, name="trace-replay"),
    path("planner/replay/<int:pk>/", planner_views.trace_replay_detail,
         name="trace-replay-detail"),
    path("planner/replay/<int:pk>/scenario.json", planner_views.trace_replay_download,
         name="trace-replay-download"),
]
