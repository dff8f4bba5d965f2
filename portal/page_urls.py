"""Portal pages: the home page and its queue-tree partial."""

from django.urls import path

from portal import views

urlpatterns = [
    path("", views.home, name="home"),
    path("home/tree/", views.home_tree, name="home-tree"),
]
