"""Portal pages: the home page (dashboard) and the read-only queue tree with its partial."""

from django.urls import path

from portal import views

urlpatterns = [
    path("", views.home, name="home"),
    path("tree/", views.tree, name="tree"),
    path("tree/partial/", views.tree_partial, name="tree-partial"),
]
