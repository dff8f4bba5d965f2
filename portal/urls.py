"""URL map: pages per app, the REST API under /api/v1/, the OpenAPI schema and docs."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from portal import errors, monitoring
from portal.views import LoginView, admin_login

# Errors outside DRF's views: JSON under /api/, HTML pages elsewhere (portal/errors.py).
handler400 = errors.bad_request
handler403 = errors.permission_denied
handler404 = errors.page_not_found
handler500 = errors.server_error

urlpatterns = [
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/login/", admin_login),
    path("admin/", admin.site.urls),
    # Prometheus' scrape (bearer token of ALLOT_METRICS_TOKEN): docs/operations.md.
    path("metrics", monitoring.metrics, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file: the CSP refuses inline scripts.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"),
         name="api-docs"),
    path("api/v1/", include("portal.api_urls")),
    path("api/v1/", include("quotas.api_urls")),
    path("api/v1/", include("policies.api_urls")),
    path("api/v1/", include("quotas.capacity.api_urls")),
    path("api/v1/", include("portal.pages.api_urls")),
    path("api/v1/", include("scheduling.api_urls")),
    path("api/v1/", include("billing.api_urls")),
    path("api/v1/", include("portal.history.api_urls")),
    # Any other /api/ path: a JSON 404, with DEBUG on too (Django's would be an HTML page).
    re_path(r"^api/(?P<rest>.*)$", errors.api_not_found),
    path("", include("portal.sso.urls")),
    path("", include("portal.page_urls")),
    path("", include("policies.urls")),
    path("", include("quotas.capacity.urls")),
    path("", include("portal.pages.urls")),
    path("", include("scheduling.urls")),
    path("", include("billing.urls")),
    path("", include("portal.history.urls")),
    path("", include("scheduling.backends.simulated.urls")),
    # Any other page: the product's 404 page, with DEBUG on too (portal/errors.py).
    re_path(r"^(?P<rest>.*)$", errors.page_missing),
]
