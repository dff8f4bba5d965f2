"""Tokens: issued for good credentials, stored hashed, usable, revocable; they expire, a read
token only reads, and a user lists and revokes their tokens."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from portal.models import ApiToken, token_hash
from tests.factories import PASSWORD, AdminFactory, UserFactory

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


def issue(username, **extra):
    return APIClient().post("/api/v1/auth/token",
                            {"username": username, "password": PASSWORD, **extra}, format="json")


def test_a_token_expires_after_the_default_lifetime_and_writes(settings):
    UserFactory(username="gus")
    before = timezone.now()
    body = issue("gus").json()
    assert body["scope"] == "write"
    expires = ApiToken.objects.get(prefix=body["prefix"]).expires_at
    assert expires - before >= timedelta(days=settings.ALLOT_API_TOKEN_TTL_DAYS) == timedelta(
        days=90)
    assert parse_datetime(body["expires_at"]) == expires


def test_an_expired_token_is_refused_naming_when_it_expired():
    user = UserFactory(username="hana")
    raw = issue("hana", expires_in_days=1).json()["token"]
    ApiToken.objects.filter(user=user).update(
        expires_at=datetime(2026, 3, 1, 12, 30, tzinfo=UTC))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    response = client.get("/api/v1/flavors")
    assert response.status_code == 401
    assert response.json()["detail"].startswith("Token expired on 2026-03-01 12:30 UTC")
    assert ApiToken.objects.get(user=user).last_used_at is None


def test_a_read_token_reads_and_may_not_write():
    AdminFactory(username="ines")
    body = issue("ines", scope="read").json()
    assert body["scope"] == "read"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {body['token']}")
    assert client.get("/api/v1/flavors").status_code == 200
    assert client.head("/api/v1/flavors").status_code == 200
    response = client.post("/api/v1/flavors", {"name": "h100-80g"}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith(
        "This token's scope is read: it may only GET, HEAD or OPTIONS, not POST")
    assert client.delete("/api/v1/auth/token").status_code == 403
    assert ApiToken.objects.filter(prefix=body["prefix"]).exists()


@pytest.mark.parametrize(("extra", "field", "text"), [
    ({"expires_in_days": 366}, "expires_in_days", "from 1 to 365 days, not 366"),
    ({"expires_in_days": 0}, "expires_in_days", "greater than or equal to 1"),
    ({"scope": "admin"}, "scope", '"admin" is not a valid choice'),
])
def test_a_bad_lifetime_or_scope_is_named(extra, field, text):
    UserFactory(username="jack")
    response = issue("jack", **extra)
    assert response.status_code == 400
    assert text in response.json()[field][0]
    assert not ApiToken.objects.exists()


def test_tokens_are_listed_and_revoked_one_by_one():
    user = UserFactory(username="kate")
    UserFactory(username="liam")
    old = issue("kate", scope="read", expires_in_days=7).json()
    new = issue("kate").json()
    other = issue("liam").json()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new['token']}")
    rows = client.get("/api/v1/auth/tokens").json()["results"]
    assert [(r["prefix"], r["scope"], r["expired"]) for r in rows] == [
        (new["prefix"], "write", False), (old["prefix"], "read", False)]
    assert set(rows[0]) == {"id", "prefix", "scope", "created_at", "expires_at",
                            "last_used_at", "expired"}
    other_id = ApiToken.objects.get(prefix=other["prefix"]).pk
    assert client.delete(f"/api/v1/auth/tokens/{other_id}").status_code == 404
    response = client.delete(f"/api/v1/auth/tokens/{rows[1]['id']}")
    assert response.status_code == 200 and response.json() == {"revoked": 1}
    assert list(ApiToken.objects.filter(user=user).values_list("prefix", flat=True)) == [
        new["prefix"]]


def test_bearer_is_accepted_like_token():
    UserFactory(username="bea")
    client = APIClient()
    raw = client.post("/api/v1/auth/token", {"username": "bea", "password": PASSWORD},
                      format="json").json()["token"]
    for header in (f"Bearer {raw}", f"bearer {raw}", f"Token {raw}"):
        client.credentials(HTTP_AUTHORIZATION=header)
        r = client.get("/api/v1/workloads")
        assert r.status_code == 200, (header, r.content)
    client.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    r = client.get("/api/v1/workloads")
    assert r.status_code == 401 and r.json() == {"detail": "Invalid token."}
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw} extra")
    r = client.get("/api/v1/workloads")
    assert r.status_code == 401 and "exactly one token" in r.json()["detail"]
