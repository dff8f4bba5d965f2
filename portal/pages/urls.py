"""Portal pages: dashboard, approval inbox, quota tree editor, queue charts, fleet."""

from django.urls import path

from portal.pages import views

urlpatterns = [
    path("dashboard/", views.dashboard, name="dashboard"),
    path("approvals/", views.approval_inbox, name="approval-inbox"),
    path("approvals/workloads/<int:pk>/<str:action>/", views.workload_decision,
         name="workload-decision"),
    path("queues/", views.queue_tree, name="queue-tree"),
    path("queues/borrowing/", views.borrowing, name="borrowing"),
    path("queues/check/", views.queue_tree_check, name="queue-tree-check"),
    path("queues/add/", views.queue_add, name="queue-add"),
    path("queues/<int:pk>/remove/", views.queue_remove, name="queue-remove"),
    path("queues/q/<path:path>/", views.queue_detail, name="queue-detail"),
    path("fleet/", views.fleet, name="fleet"),
    path("fleet/<slug:name>/", views.cluster_detail, name="cluster-detail"),
]
