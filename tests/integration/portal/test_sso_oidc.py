"""Sign-in with OpenID Connect against a real provider process (oidc-provider-mock): the
authorization-code flow through the browser's redirects, the code exchanged for tokens by the
portal, the ID token's signature checked with the provider's JWKS. The user is created on
first sign-in; their teams, roles and admin flags follow the groups claim at each sign-in;
an SSO user gets API tokens with their session; local passwords can be turned off; a
sign-in that fails says why."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client, override_settings
from jwt.algorithms import RSAAlgorithm
from rest_framework.test import APIClient

from portal.models import ApiToken
from portal.sso import oidc
from portal.sso.mapping import parse_group_teams, parse_groups
from portal.sso.options import LOCAL_BACKEND, OIDC_BACKEND
from quotas.models import Team, TeamMembership, TeamRole
from tests.factories import PASSWORD, UserFactory
from tests.integration.portal.sso_servers import TESTSERVER, Provider, free_port, oidc_provider

pytestmark = pytest.mark.django_db

MAPPING = "gpu-vision=vision; gpu-vision-leads=vision:lead\ngpu-nlp=nlp"


@pytest.fixture(scope="module")
def provider():
    with oidc_provider() as running:
        running.register("client_secret_basic")
        yield running


def oidc_settings(provider: Provider, **over):
    """The settings ALLOT_OIDC_* give for this provider (what portal/settings.py builds)."""
    values = {
        "AUTHENTICATION_BACKENDS": [LOCAL_BACKEND, OIDC_BACKEND],
        "OIDC_RP_CLIENT_ID": provider.client_id,
        "OIDC_RP_CLIENT_SECRET": provider.client_secret,
        "OIDC_TOKEN_USE_BASIC_AUTH": True,
        "ALLOT_OIDC_ISSUER": provider.issuer,
        "ALLOT_OIDC_ENDPOINTS": {"authorization_endpoint": "", "token_endpoint": "",
                                 "userinfo_endpoint": "", "jwks_uri": ""},
        "ALLOT_OIDC_NAME": "Example ID",
        "ALLOT_SSO_GROUP_TEAMS": parse_group_teams(MAPPING, "ALLOT_SSO_GROUP_TEAMS"),
        "ALLOT_SSO_ADMIN_GROUPS": parse_groups("allot-admins"),
    }
    return override_settings(**{**values, **over})


@pytest.fixture
def signed_in_with(provider):
    """Settings for `provider` while the test runs."""
    with oidc_settings(provider):
        yield provider


@pytest.fixture
def teams(db):
    return {name: Team.objects.create(name=name) for name in ("vision", "nlp", "ops")}


def browse(client: Client, url: str) -> requests.Response | object:
    """One step of a browser: the portal's URLs through the test client, the provider's with
    requests (no redirect followed)."""
    parts = urlsplit(url)
    if not parts.netloc or f"{parts.scheme}://{parts.netloc}" == TESTSERVER:
        return client.get(f"{parts.path}?{parts.query}" if parts.query else parts.path)
    return requests.get(url, allow_redirects=False, timeout=5)


def sign_in(client: Client, sub: str, next_url: str = "/tree/", action: str = "allow"):
    """The authorization-code flow as a browser runs it: start on the portal, be sent to the
    provider's authorization page, choose the subject there, follow its redirect back to
    the portal's callback. Returns the callback's answer."""
    start = client.get(f"/oidc/authenticate/?next={next_url}")
    assert start.status_code == 302, start.content
    authorize = start["Location"]
    query = dict(p.split("=", 1) for p in urlsplit(authorize).query.split("&"))
    assert {"code_challenge", "nonce", "state"} <= query.keys()  # PKCE, nonce, state
    form = {"sub": sub} if action == "allow" else {"action": "deny"}
    answer = requests.post(authorize, data=form, allow_redirects=False, timeout=5)
    assert answer.status_code == 302, answer.text
    assert answer.headers["Location"].startswith(f"{TESTSERVER}/oidc/callback/?")
    return browse(client, answer.headers["Location"])


def roles(user) -> dict[str, str]:
    return dict(TeamMembership.objects.filter(user=user).values_list("team__name", "role"))


def error_on_login_page(client: Client, response) -> str:
    assert response.status_code == 302 and response["Location"] == "/login/"
    return " ".join(str(m) for m in get_messages(response.wsgi_request))


def test_first_sign_in_creates_the_user_with_the_teams_and_roles_of_their_groups(
        signed_in_with, teams):
    signed_in_with.set_user("u-erin", preferred_username="erin", email="erin@example.org",
                            given_name="Erin", family_name="Hale",
                            groups=["gpu-vision-leads", "GPU-NLP", "unrelated"])
    client = Client()
    response = sign_in(client, "u-erin")
    assert response.status_code == 302 and response["Location"] == "/tree/"
    erin = get_user_model().objects.get(username="erin")
    assert client.session["_auth_user_id"] == str(erin.pk)
    assert (erin.email, erin.first_name, erin.last_name) == ("erin@example.org", "Erin", "Hale")
    assert not erin.has_usable_password()
    assert roles(erin) == {"vision": TeamRole.LEAD, "nlp": TeamRole.RESEARCHER}
    assert not erin.is_staff and not erin.is_superuser
    page = client.get("/tree/")
    assert page.status_code == 200 and "erin" in page.content.decode()


def test_each_sign_in_brings_teams_roles_and_admin_in_step_with_the_groups(
        signed_in_with, teams):
    frank = UserFactory(username="frank", email="old@example.org")
    TeamMembership.objects.create(team=teams["nlp"], user=frank, role=TeamRole.LEAD)
    TeamMembership.objects.create(team=teams["ops"], user=frank, role=TeamRole.LEAD)
    signed_in_with.set_user("u-frank", preferred_username="frank", email="frank@example.org",
                            groups=["gpu-vision", "allot-admins"])
    assert sign_in(Client(), "u-frank").status_code == 302
    frank.refresh_from_db()
    # nlp is mapped and no group names it: left; ops is not mapped: kept as it was.
    assert roles(frank) == {"vision": TeamRole.RESEARCHER, "ops": TeamRole.LEAD}
    assert frank.is_staff and frank.is_superuser and frank.email == "frank@example.org"
    assert frank.has_usable_password()  # a local account that signs in with SSO keeps it

    signed_in_with.set_user("u-frank", preferred_username="frank", groups=["gpu-vision-leads"])
    assert sign_in(Client(), "u-frank").status_code == 302
    frank.refresh_from_db()
    assert roles(frank) == {"vision": TeamRole.LEAD, "ops": TeamRole.LEAD}
    assert not frank.is_staff and not frank.is_superuser

    signed_in_with.set_user("u-frank", preferred_username="frank")  # no groups claim at all
    assert sign_in(Client(), "u-frank").status_code == 302
    assert roles(frank) == {"ops": TeamRole.LEAD}


def test_groups_may_come_from_a_nested_claim(provider, teams):
    provider.set_user("u-gina", preferred_username="gina",
                      realm_access={"roles": ["gpu-nlp", "offline_access"]})
    with oidc_settings(provider, ALLOT_OIDC_GROUPS_CLAIM="realm_access.roles"):
        assert sign_in(Client(), "u-gina").status_code == 302
    assert roles(get_user_model().objects.get(username="gina")) == {"nlp": TeamRole.RESEARCHER}


def test_an_sso_user_gets_api_tokens_with_the_session_not_with_a_token(signed_in_with, teams):
    signed_in_with.set_user("u-hugo", preferred_username="hugo", groups=["gpu-vision"])
    client = Client()
    sign_in(client, "u-hugo")
    response = client.post("/api/v1/auth/tokens", {"scope": "read", "expires_in_days": 7},
                           content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["username"] == "hugo" and body["scope"] == "read"
    token = ApiToken.objects.get(user__username="hugo")
    assert token.prefix == body["token"][:8]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {body['token']}")
    assert api.get("/api/v1/auth/tokens").json()["results"][0]["id"] == token.pk
    refused = api.post("/api/v1/auth/tokens", {"scope": "write"}, format="json")
    assert refused.status_code == 403  # a read token may not POST at all
    write = client.post("/api/v1/auth/tokens", {}, content_type="application/json").json()
    api.credentials(HTTP_AUTHORIZATION=f"Token {write['token']}")
    refused = api.post("/api/v1/auth/tokens", {"scope": "write"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("An API token cannot issue tokens")
    # The page works too: created and shown once.
    page = client.post("/account/tokens/", {"scope": "write", "expires_in_days": 30})
    assert page.status_code == 200 and ApiToken.objects.filter(user__username="hugo").count() == 3


def test_with_local_passwords_off_only_single_sign_on_signs_in(provider, teams):
    UserFactory(username="ivan")
    with oidc_settings(provider, AUTHENTICATION_BACKENDS=[OIDC_BACKEND]):
        page = Client().get("/login/").content.decode()
        assert "Sign in with Example ID" in page and 'name="password"' not in page
        response = Client().post("/login/", {"username": "ivan", "password": PASSWORD})
        assert response.status_code == 403
        assert "Signing in with a password is turned off on this site" in response.content.decode()
        assert "_auth_user_id" not in response.client.session
        response = APIClient().post("/api/v1/auth/token",
                                    {"username": "ivan", "password": PASSWORD}, format="json")
        assert response.status_code == 403 and not ApiToken.objects.exists()
        assert response.json()["detail"] == (
            "Signing in with a password is turned off on this site: sign in with Example ID in "
            "a browser (/oidc/authenticate/), then create an API token on /account/tokens/ (or "
            "POST /api/v1/auth/tokens with that session).")
        response = Client().get("/admin/login/?next=/admin/scheduling/cluster/")
        assert response.status_code == 302
        assert response["Location"] == "/login/?next=/admin/scheduling/cluster/"
        provider.set_user("u-ivan", preferred_username="ivan", groups=["allot-admins"])
        client = Client()
        assert sign_in(client, "u-ivan", next_url="/admin/")["Location"] == "/admin/"
        assert client.get("/admin/").status_code == 200  # an admin by their group
    with oidc_settings(provider):  # both: the button, and the form below it
        page = Client().get("/login/").content.decode()
        assert "Sign in with Example ID" in page and 'name="password"' in page


def test_a_deactivated_account_is_refused_with_the_reason(signed_in_with, teams):
    UserFactory(username="judy", is_active=False)
    signed_in_with.set_user("u-judy", preferred_username="judy", groups=["gpu-vision"])
    client = Client()
    message = error_on_login_page(client, sign_in(client, "u-judy"))
    assert message == ("Single sign-on failed: the account 'judy' is deactivated in Allot; an "
                       "admin can reactivate it.")
    assert "_auth_user_id" not in client.session
    assert not TeamMembership.objects.filter(user__username="judy").exists()


def test_a_missing_username_claim_is_named_with_the_claims_sent(signed_in_with):
    signed_in_with.set_user("u-kim", email="kim@example.org")
    client = Client()
    message = error_on_login_page(client, sign_in(client, "u-kim"))
    assert message.startswith("Single sign-on failed: the identity provider sent no "
                              "'preferred_username' claim to name the user (it sent ")
    assert "email" in message and "sub" in message and "ALLOT_OIDC_USERNAME_CLAIM" in message
    assert not get_user_model().objects.exists()


def test_an_id_token_from_another_issuer_is_refused(provider):
    # The same server under another name: its tokens say 127.0.0.1, the setting localhost.
    port = urlsplit(provider.issuer).port
    endpoints = {"authorization_endpoint": f"{provider.issuer}/oauth2/authorize",
                 "token_endpoint": f"{provider.issuer}/oauth2/token",
                 "userinfo_endpoint": f"{provider.issuer}/userinfo",
                 "jwks_uri": f"{provider.issuer}/jwks"}
    provider.set_user("u-lee", preferred_username="lee")
    with oidc_settings(provider, ALLOT_OIDC_ISSUER=f"http://localhost:{port}",
                       ALLOT_OIDC_ENDPOINTS=endpoints):
        client = Client()
        message = error_on_login_page(client, sign_in(client, "u-lee"))
    assert message == (f"Single sign-on failed: the ID token was refused: its issuer "
                       f"'{provider.issuer}' is not ALLOT_OIDC_ISSUER "
                       f"'http://localhost:{port}'.")
    assert not get_user_model().objects.exists()


@pytest.fixture
def foreign_jwks():
    """A JWKS endpoint with a key the provider never signed with."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key = {**json.loads(RSAAlgorithm.to_jwk(private.public_key())), "alg": "RS256"}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps({"keys": [key]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jwks"
    server.shutdown()
    server.server_close()


def test_an_id_token_not_signed_by_a_key_of_the_jwks_is_refused(provider, foreign_jwks):
    provider.set_user("u-mia", preferred_username="mia")
    endpoints = {"authorization_endpoint": "", "token_endpoint": "", "userinfo_endpoint": "",
                 "jwks_uri": foreign_jwks}
    with oidc_settings(provider, ALLOT_OIDC_ENDPOINTS=endpoints):
        client = Client()
        message = error_on_login_page(client, sign_in(client, "u-mia"))
    assert message == "Single sign-on failed: the ID token was refused: JWS token " \
                      "verification failed."
    assert not get_user_model().objects.exists()


def test_a_refusal_by_the_provider_is_shown(signed_in_with):
    client = Client()
    message = error_on_login_page(client, sign_in(client, "u-ned", action="deny"))
    assert message.startswith("Single sign-on failed: the identity provider refused: "
                              "access_denied")


def test_an_answer_used_twice_or_from_another_browser_is_refused(signed_in_with):
    signed_in_with.set_user("u-olga", preferred_username="olga")
    client = Client()
    start = client.get("/oidc/authenticate/")
    answer = requests.post(start["Location"], data={"sub": "u-olga"}, allow_redirects=False,
                           timeout=5)
    callback = answer.headers["Location"]
    other = Client()
    message = error_on_login_page(other, browse(other, callback))
    assert message == ("Single sign-on failed: the sign-in was not completed (it began too "
                       "long ago or in another browser); sign in again.")
    assert browse(client, callback)["Location"] == "/"  # the browser that started it
    message = error_on_login_page(client, browse(client, callback))
    assert "belongs to no sign-in started in this browser (or was used already)" in message


def test_a_provider_that_does_not_answer_is_named(provider):
    oidc._discover.cache_clear()
    closed = f"http://127.0.0.1:{free_port()}"
    with oidc_settings(provider, ALLOT_OIDC_ISSUER=closed):
        client = Client()
        response = client.get("/oidc/authenticate/")
        message = error_on_login_page(client, response)
    assert message.startswith(
        f"Single sign-on failed: the identity provider's discovery document "
        f"({closed}/.well-known/openid-configuration) could not be read: ")


def test_sign_in_routes_are_404_when_oidc_is_off():
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
    page = Client().get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
