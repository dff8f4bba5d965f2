"""The API tokens page: a user creates a token with a scope and a lifetime (shown once),
lists their tokens with scope and expiry, and revokes them; other users' tokens are 404."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.models import ApiToken, token_hash
from portal.services import api_token_create
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

PAGE = "/account/tokens/"


def signed_in(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_a_token_is_created_with_scope_and_lifetime_and_shown_once():
    user = UserFactory(username="uma")
    client = signed_in(user)
    response = client.post(PAGE, {"scope": "read", "expires_in_days": "7"})
    assert response.status_code == 200
    token = ApiToken.objects.get(user=user)
    raw = response.context["created"]["raw"]
    assert token.key_hash == token_hash(raw) and raw in response.content.decode()
    assert token.scope == "read"
    assert abs(token.expires_at - (timezone.now() + timedelta(days=7))) < timedelta(minutes=1)
    assert raw not in client.get(PAGE).content.decode()


def test_a_bad_lifetime_is_named_and_nothing_created():
    user = UserFactory(username="vic")
    response = signed_in(user).post(PAGE, {"scope": "write", "expires_in_days": "400"})
    assert response.status_code == 400
    assert "less than or equal to 365" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_the_list_shows_own_tokens_with_scope_and_expiry_in_a_query_budget():
    user, other = UserFactory(username="wes"), UserFactory(username="xia")
    mine = [api_token_create(user=user, scope=s)[0] for s in ("read", "write", "write")]
    ApiToken.objects.filter(pk=mine[0].pk).update(expires_at=timezone.now() - timedelta(days=1))
    theirs, _ = api_token_create(user=other)
    client = signed_in(user)
    client.get(PAGE)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(PAGE).content.decode()
    assert len(queries) == 4  # session, user, the budget banner's teams, the tokens
    for token in mine:
        assert f"<code>{token.prefix}…</code>" in html
    assert theirs.prefix not in html
    assert html.count("(expired)") == 1 and html.count("<td data-label=\"Scope\">read") == 1


def test_revoke_own_token_and_not_anothers():
    user, other = UserFactory(username="yan"), UserFactory(username="zoe")
    mine, _ = api_token_create(user=user)
    theirs, _ = api_token_create(user=other)
    client = signed_in(user)
    assert client.post(f"/account/tokens/{theirs.pk}/revoke/").status_code == 404
    response = client.post(f"/account/tokens/{mine.pk}/revoke/", follow=True)
    assert f"Token {mine.prefix}… revoked" in response.content.decode()
    assert list(ApiToken.objects.values_list("pk", flat=True)) == [theirs.pk]


def test_the_page_needs_a_sign_in():
    response = Client().get(PAGE)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
