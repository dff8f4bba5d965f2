"""URL patterns of this app."""

from django.urls import URLPattern, URLResolver, path

urlpatterns: list[URLPattern | URLResolver] = []

# Clusters (foundation helper).
from scheduling import api as api_clusters  # noqa: E402

urlpatterns += [
    path("clusters", api_clusters.ClusterList.as_view(), name="api-clusters"),
    path("clusters/<slug:name>", api_clusters.ClusterDetail.as_view(), name="api-cluster"),
]
