"""The history page."""

from django.urls import path

from portal.history import views

urlpatterns = [
    path("history/", views.history_list, name="history"),
    path("history/section/", views.history_section_rows, name="history-section"),
]
