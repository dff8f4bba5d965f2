"""Portal pages: the home page (dashboard), the read-only queue tree with its partial, the
user's API tokens."""

from django.urls import path

from portal import account, views

urlpatterns = [
    path("", views.home, name="home"),
    path("tree/", views.tree, name="tree"),
    path("tree/partial/", views.tree_partial, name="tree-partial"),
    path("search/", account.search, name="search"),
    path("account/", account.profile, name="profile"),
    path("account/notifications/", account.notification_list, name="notifications"),
    path("account/notifications/read/", account.notification_read, name="notifications-read"),
    path("account/tokens/", views.api_tokens, name="api-tokens"),
    path("account/tokens/<int:pk>/revoke/", views.api_token_revoke_view, name="api-token-revoke"),
]
