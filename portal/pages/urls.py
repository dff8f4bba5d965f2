"""Portal pages: dashboard, approval inbox, quota tree editor, fleet."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
