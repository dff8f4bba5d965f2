"""Token lookups are cached per thread under the change log's `auth` topic; last use is written
once a minute; a revoked token, a deactivated user, a changed scope or expiry is refused by
the next request, also when the change was made by another process (no signal here: plain
SQL, committed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from core import changes
from portal import authentication
from portal.models import ApiToken
from portal.services import api_token_create
from tests.factories import UserFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the change log is PostgreSQL's"),
]


@pytest.fixture(autouse=True)
def fresh_cache():
    changes.reset()
    yield
    changes.reset()


def token_client(user):
    token, raw = api_token_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return token, client


def token_queries(client) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/api/v1/flavors").status_code == 200
    return [q["sql"] for q in ctx.captured_queries if "portal_apitoken" in q["sql"]]


def elsewhere(sql: str, params: list) -> None:
    """A write as another process makes it: plain SQL, committed, no signal in this one."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_lookup_is_cached_and_last_use_written_once_a_minute(monkeypatch):
    token, client = token_client(UserFactory(username="erin"))
    first = token_queries(client)
    assert len(first) == 2 and first[1].startswith("UPDATE")  # lookup + first use
    token.refresh_from_db()
    used = token.last_used_at
    assert used is not None
    assert token_queries(client) == []  # cached (writing last use drops nothing)

    later = used + timedelta(seconds=61)
    monkeypatch.setattr(authentication.timezone, "now", lambda: later)
    assert [s.split()[0] for s in token_queries(client)] == ["UPDATE"]
    token.refresh_from_db()
    assert token.last_used_at == later
    assert token_queries(client) == []


def test_a_warm_request_checks_the_change_log_once():
    _, client = token_client(UserFactory(username="kim"))
    token_queries(client)
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/api/v1/auth/tokens").status_code == 200
    checks = [q["sql"] for q in ctx.captured_queries if "policies_changes_since" in q["sql"]]
    assert len(checks) == 1


def test_another_process_wrote_last_use_recently(monkeypatch):
    """The UPDATE is conditional: a write by another process within the minute stands."""
    token, client = token_client(UserFactory(username="finn"))
    token_queries(client)
    recent = timezone.now() + timedelta(seconds=50)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=recent)
    monkeypatch.setattr(authentication.timezone, "now", lambda: recent + timedelta(seconds=20))
    token_queries(client)  # the cache says stale; the row says 20 s ago
    token.refresh_from_db()
    assert token.last_used_at == recent


def test_revoked_token_is_refused_at_once():
    _, client = token_client(UserFactory(username="gail"))
    token_queries(client)
    assert client.delete("/api/v1/auth/token").status_code == 200
    response = client.get("/api/v1/flavors")
    assert response.status_code == 401 and response.json() == {"detail": "Invalid token."}


def test_token_deleted_by_another_process_is_refused_at_once():
    token, client = token_client(UserFactory(username="ivy"))
    token_queries(client)
    assert token_queries(client) == []  # cached
    elsewhere("DELETE FROM portal_apitoken WHERE id = %s", [token.pk])
    response = client.get("/api/v1/flavors")
    assert response.status_code == 401 and response.json() == {"detail": "Invalid token."}


def test_user_deactivated_by_another_process_is_refused_at_once():
    user = UserFactory(username="hal")
    _, client = token_client(user)
    token_queries(client)
    assert token_queries(client) == []  # cached
    elsewhere("UPDATE auth_user SET is_active = false WHERE id = %s", [user.pk])
    response = client.get("/api/v1/flavors")
    assert response.status_code == 401
    assert response.json() == {"detail": "User inactive or deleted."}


def test_expiry_and_scope_changed_by_another_process_take_effect_at_once():
    token, client = token_client(UserFactory(username="lee"))
    token_queries(client)
    elsewhere("UPDATE portal_apitoken SET scope = 'read' WHERE id = %s", [token.pk])
    assert client.delete("/api/v1/auth/token").status_code == 403
    past = timezone.now() - timedelta(hours=1)
    elsewhere("UPDATE portal_apitoken SET expires_at = %s WHERE id = %s", [past, token.pk])
    response = client.get("/api/v1/flavors")
    assert response.status_code == 401 and "expired on" in response.json()["detail"]


def test_each_request_gets_its_own_user_object():
    user = UserFactory(username="jo")
    _, client = token_client(user)
    auth = authentication.HashedTokenAuthentication()
    raw = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    (u1, t1), (u2, t2) = auth.authenticate_credentials(raw), auth.authenticate_credentials(raw)
    assert u1 is not u2 and t1 is not t2 and u1.pk == u2.pk == user.pk
    assert t1.user is u1


def test_a_connection_lost_under_the_change_log_check_is_an_outage_not_a_bug():
    # The check runs as a prepared statement on psycopg's own cursor: a connection the
    # server drops just then (a restart, a failover) must be a 503 as anywhere else.
    token, client = token_client(UserFactory())
    assert client.get("/api/v1/auth/tokens").status_code == 200  # warm: the check ran
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
    other.close()
    try:
        response = client.get("/api/v1/auth/tokens")
        assert response.status_code == 503, response.content
        assert response.json() == {"detail": "the database is unavailable; try again shortly"}
    finally:
        connection.close()
