"""URL patterns of this app."""

from django.urls import URLPattern, URLResolver, path

from scheduling import api_workloads

urlpatterns: list[URLPattern | URLResolver] = []

# Workloads (workers helper).
urlpatterns += [
    path("workloads", api_workloads.WorkloadListCreateApi.as_view(), name="api-workloads"),
    path("workloads/<int:pk>", api_workloads.WorkloadDetailApi.as_view(),
         name="api-workload-detail"),
    path("workloads/<int:pk>/cancel", api_workloads.WorkloadCancelApi.as_view(),
         name="api-workload-cancel"),
]

# A submission's preview: verdicts, cost estimate, forecast (nothing saved).
from scheduling import api_preview  # noqa: E402

urlpatterns += [
    path("workloads/preview", api_preview.WorkloadPreviewApi.as_view(),
         name="api-workload-preview"),
]

# Clusters (foundation helper).
from scheduling import api as api_clusters  # noqa: E402

urlpatterns += [
    path("clusters", api_clusters.ClusterList.as_view(), name="api-clusters"),
    path("clusters/<slug:name>", api_clusters.ClusterDetail.as_view(), name="api-cluster"),
]

# The update path of a workload: PATCH on the detail URL (its GET unchanged, so this
# route goes first) and resubmit.
from scheduling import api_updates  # noqa: E402

urlpatterns[:0] = [
    path("workloads/<int:pk>", api_updates.WorkloadDetailUpdateApi.as_view(),
         name="api-workload-update"),
    path("workloads/<int:pk>/resubmit", api_updates.WorkloadResubmitApi.as_view(),
         name="api-workload-resubmit"),
    path("workloads/<int:pk>/extend", api_updates.WorkloadExtendApi.as_view(),
         name="api-workload-extend"),
]

# What-if on the live state (scheduling/whatif/).
from scheduling.whatif import api as api_whatif  # noqa: E402

urlpatterns += [
    path("what-if", api_whatif.WhatIfCreateApi.as_view(), name="api-what-if"),
    path("what-if/<int:pk>", api_whatif.WhatIfDetailApi.as_view(), name="api-what-if-detail"),
    path("what-if/<int:pk>/scenario", api_whatif.WhatIfScenarioApi.as_view(),
         name="api-what-if-scenario"),
]

# The capacity planner's trace replay (scheduling/planner/).
from scheduling.planner import api as api_planner  # noqa: E402

urlpatterns += [
    path("trace-replays", api_planner.TraceReplayCreateApi.as_view(), name="api-trace-replays"),
    path("trace-replays/<int:pk>", api_planner.TraceReplayDetailApi.as_view(),
         name="api-trace-replay-detail"),
    path("trace-replays/<int:pk>/scenario", api_planner.TraceReplayScenarioApi.as_view(),
         name="api-trace-replay-scenario"),
]
