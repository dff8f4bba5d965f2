"""URLs of the simulated clusters, included at the site root from portal/urls.py."""

from django.urls import path

from scheduling.backends.simulated import views

urlpatterns = [
    path("sim/<slug:cluster>/metrics", views.dcgm_metrics, name="sim-dcgm-metrics"),
]
