"""Single sign-on routes: start an OpenID Connect sign-in, and the provider's way back (the
redirect URI to register with the provider: https://<this site>/oidc/callback/)."""

from django.urls import path

from portal.sso.oidc import AuthenticateView, CallbackView

urlpatterns = [
    # The names mozilla-django-oidc reverses.
    path("oidc/authenticate/", AuthenticateView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
]
