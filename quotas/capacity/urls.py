"""Pages of capacity requests."""

from django.urls import path

from quotas.capacity import views

urlpatterns = [
    path("capacity-requests/", views.capacity_request_list, name="capacity-request-list"),
    path("capacity-requests/new/", views.capacity_request_new, name="capacity-request-new"),
    path("capacity-requests/<int:pk>/", views.capacity_request_detail,
         name="capacity-request-detail"),
    path("capacity-requests/<int:pk>/<str:action>/", views.capacity_request_action,
         name="capacity-request-action"),
]
