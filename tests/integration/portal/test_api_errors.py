"""API errors (portal/api_errors.py): a database that cannot be reached answers 503 with
Retry-After, in JSON; a statement failing on a live connection still answers 500."""

from __future__ import annotations

import socket

import pytest
from django.db import OperationalError, connection

from scheduling import selectors
from tests.factories import UserFactory
from tests.integration.api.conftest import client_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.django_db(transaction=True)
def test_the_database_down_answers_503_with_retry_after():
    client = client_for(UserFactory(username="alice"))
    assert client.get("/api/v1/workloads").status_code == 200
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = free_port()  # nothing listens there: as a server down
    try:
        listing = client.get("/api/v1/workloads")
        submission = client.post("/api/v1/workloads", {"name": "x"}, format="json")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    for response in (listing, submission):
        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert response.json() == {"detail": "the database is unavailable; try again shortly"}
    assert client.get("/api/v1/workloads").status_code == 200


@pytest.mark.django_db
def test_a_failing_statement_on_a_live_connection_is_still_a_500(monkeypatch):
    client = client_for(UserFactory(username="alice"))

    def deadlock(**_):
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(selectors, "workload_list", deadlock)
    client.raise_request_exception = False
    response = client.get("/api/v1/workloads")
    assert response.status_code == 500 and "Retry-After" not in response


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_the_database_dropped_is_replaced_before_the_next_request():
    """A web thread's kept connection (CONN_MAX_AGE) that a database restart dropped: the next
    request gets a new one instead of a 503."""
    import psycopg

    client = client_for(UserFactory(username="alice"))
    max_age = connection.settings_dict["CONN_MAX_AGE"]
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = 60
    try:
        assert client.get("/api/v1/workloads").status_code == 200
        pid = connection.connection.info.backend_pid
        s = connection.settings_dict
        with psycopg.connect(host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432,
                             user=s["USER"] or "postgres", password=s["PASSWORD"] or None,
                             dbname=s["NAME"], autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        connection.close_if_unusable_or_obsolete()  # what each request starts with
        assert client.get("/api/v1/workloads").status_code == 200
    finally:
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = max_age


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_is_checked_by_the_change_logs_query_not_a_select_1(monkeypatch):
    """The change log's check (the first query of a token-authenticated request) stands for
    the kept connection's health check: no `SELECT 1` round trip per request."""
    from django.test.utils import CaptureQueriesContext

    client = client_for(UserFactory(username="alice"))
    max_age = connection.settings_dict["CONN_MAX_AGE"]
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = 60
    try:
        assert client.get("/api/v1/workloads").status_code == 200
        connection.close_if_unusable_or_obsolete()  # what each request starts with
        assert connection.health_check_enabled and not connection.health_check_done
        checks: list[bool] = []
        real = connection.is_usable
        monkeypatch.setattr(connection, "is_usable", lambda: checks.append(True) or real())
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/api/v1/workloads").status_code == 200
        assert "policies_changes_since" in ctx.captured_queries[0]["sql"]
        assert checks == []
    finally:
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = max_age
