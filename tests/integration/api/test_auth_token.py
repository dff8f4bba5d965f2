"""Tokens: issued for good credentials, stored hashed, usable, revocable."""

import pytest
from rest_framework.test import APIClient

from portal.models import ApiToken, token_hash
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def test_token_create_use_revoke():
    user = UserFactory(username="carol")
    client = APIClient()
    response = client.post("/api/v1/auth/token", {"username": "carol", "password": PASSWORD},
                           format="json")
    assert response.status_code == 201
    raw = response.json()["token"]
    assert len(raw) >= 40 and response.json()["username"] == "carol"
    stored = ApiToken.objects.get(user=user)
    assert stored.key_hash == token_hash(raw) and raw not in stored.key_hash
    assert stored.prefix == raw[:8] == response.json()["prefix"]

    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert client.get("/api/v1/queues").status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None

    response = client.delete("/api/v1/auth/token")
    assert response.status_code == 200 and response.json() == {"revoked": 1}
    assert not ApiToken.objects.filter(user=user).exists()
    response = client.get("/api/v1/queues")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}


def test_wrong_password_gives_no_token():
    UserFactory(username="dave")
    response = APIClient().post("/api/v1/auth/token", {"username": "dave", "password": "nope"},
                                format="json")
    assert response.status_code == 400
    assert "username and password" in response.json()["detail"]
    assert not ApiToken.objects.exists()


def test_missing_fields_named():
    response = APIClient().post("/api/v1/auth/token", {"username": "x"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"password": ["This field is required."]}


def test_inactive_user_token_refused():
    user = UserFactory(username="erin")
    client = APIClient()
    raw = client.post("/api/v1/auth/token", {"username": "erin", "password": PASSWORD},
                      format="json").json()["token"]
    user.is_active = False
    user.save()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert client.get("/api/v1/flavors").status_code == 401


def test_session_delete_revokes_all_tokens(client):
    user = UserFactory(username="frank")
    for _ in range(2):
        APIClient().post("/api/v1/auth/token", {"username": "frank", "password": PASSWORD},
                         format="json")
    client.force_login(user)
    response = client.delete("/api/v1/auth/token")
    assert response.status_code == 200 and response.json() == {"revoked": 2}
