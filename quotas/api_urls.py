"""API routes of the quota tree."""

from django.urls import path

from quotas import api

urlpatterns = [
    path("flavors", api.FlavorList.as_view(), name="api-flavors"),
    path("flavors/<slug:name>", api.FlavorDetail.as_view(), name="api-flavor"),
    path("queues", api.QueueList.as_view(), name="api-queues"),
    path("queues/<path:path>", api.QueueDetail.as_view(), name="api-queue"),
]
