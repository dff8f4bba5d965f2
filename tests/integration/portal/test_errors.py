"""Errors on every path: JSON under /api/ (parse limits, 404, 413, 500, database outage 503),
HTML pages elsewhere; nothing half-saved."""

import json
from types import SimpleNamespace

import pytest
from django.db import OperationalError
from django.test import Client, override_settings
from rest_framework.test import APIClient

from portal.api_errors import RETRY_AFTER_S
from scheduling.models import Workload
from tests.factories import PASSWORD
from tests.integration.portal.conftest import api_for, submission

pytestmark = pytest.mark.django_db

DEEP = "[" * 1000 + "]" * 1000


def post_raw(client: Client, url: str, body: str, content_type="application/json"):
    return client.generic("POST", url, body.encode(), content_type=content_type)


def test_deep_json_is_a_400_on_anonymous_and_signed_in_endpoints(org):
    for client, url in ((APIClient(), "/api/v1/auth/token"),
                        (api_for(org.alice), "/api/v1/workloads"),
                        (api_for(org.admin), "/api/v1/policies/validate")):
        response = post_raw(client, url, DEEP)
        assert response.status_code == 400, url
        assert response.json() == {"detail": "JSON nested deeper than 64 levels"}


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_body_over_the_limit_is_a_json_413(org, priority_classes):
    body = json.dumps(submission(image="x" * 2000))
    for content_type, data in (("application/json", body),
                               ("application/x-www-form-urlencoded", "name=" + "x" * 2000)):
        response = post_raw(api_for(org.alice), "/api/v1/workloads", data, content_type)
        assert response.status_code == 413
        assert response["Content-Type"] == "application/json"
        assert response.json() == {
            "detail": "request body larger than 1000 bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"}
    assert not Workload.objects.exists()


def test_nul_characters_are_refused_where_they_are(org, priority_classes):
    client = api_for(org.alice)
    response = client.post("/api/v1/workloads", submission(queue="rd/vision\x00"),
                           format="json")
    assert response.status_code == 400
    assert response.json() == {
        "detail": "NUL character (U+0000) in queue: text may not contain NUL"}
    response = post_raw(client, "/api/v1/workloads", "queue=%C3%97%00&name=x",
                        "application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert "NUL character (U+0000) in form field 'queue'" in response.json()["detail"]
    assert not Workload.objects.exists()


def test_nul_in_a_parameter_is_a_400_on_pages_and_the_api(org):
    response = api_for(org.alice).get("/api/v1/workloads", {"queue": "rd\x00"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "NUL character (U+0000) in parameter 'queue': text may not contain NUL"}
    page = Client()
    page.force_login(org.admin)
    response = page.post("/policies/validate/", {"policy_name": "a\x00b", "rule": "true"})
    assert response.status_code == 400
    assert "NUL character (U+0000) in parameter &#x27;policy_name&#x27;" in (
        response.content.decode())


def test_unknown_api_paths_are_json_404s_and_pages_stay_html(org):
    client = api_for(org.alice)
    for debug in (False, True):
        with override_settings(DEBUG=debug):
            response = client.get("/api/v1/no-such-thing")
            assert response.status_code == 404
            assert response.json() == {"detail": "no API endpoint at /api/v1/no-such-thing"}
            response = client.get("/api/schema")
            assert response.json() == {
                "detail": "no API endpoint at /api/schema (did you mean /api/schema/?)"}
    page = Client()
    page.login(username=org.alice.username, password=PASSWORD)
    response = page.get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_a_database_outage_is_a_503_with_retry_after(org, monkeypatch):
    def down(*args, **kwargs):
        raise OperationalError("connection to server at 127.0.0.1 refused")

    # As after a refused connection: none is open (the test's own stays, for its transaction).
    monkeypatch.setattr("portal.api_errors.connection", SimpleNamespace(connection=None))

    monkeypatch.setattr("portal.authentication.HashedTokenAuthentication.authenticate", down)
    response = api_for(org.alice).get("/api/v1/queues")
    assert response.status_code == 503 and response["Retry-After"] == str(RETRY_AFTER_S)
    assert response.json() == {"detail": "the database is unavailable; try again shortly"}

    monkeypatch.setattr("portal.pages.views.page_selectors.dashboard_queues", down)
    page = Client()
    page.login(username=org.alice.username, password=PASSWORD)
    response = page.get("/dashboard/")
    assert response.status_code == 503 and response["Retry-After"] == str(RETRY_AFTER_S)
    assert b"database cannot be reached" in response.content


def test_an_unexpected_error_under_api_is_a_json_500(org, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("quotas.api.selectors.queue_tree", broken)
    client = api_for(org.alice)
    for debug, detail in ((False, "internal server error"),
                          (True, "internal server error (RuntimeError: a bug)")):
        with override_settings(DEBUG=debug):
            response = client.get("/api/v1/queues")
        assert response.status_code == 500
        assert response.json() == {"detail": detail}


def test_handlers_answer_json_for_the_api_and_html_for_pages(rf, monkeypatch):
    from django.core.exceptions import BadRequest, RequestDataTooBig

    from portal import errors

    api, page = rf.get("/api/v1/queues"), rf.get("/queues/")
    assert json.loads(errors.bad_request(api, BadRequest("bad month")).content) == {
        "detail": "bad month"}
    assert errors.bad_request(api, RequestDataTooBig()).status_code == 413
    assert errors.bad_request(page, RequestDataTooBig()).status_code == 413
    assert errors.permission_denied(api, Exception()).status_code == 403
    assert errors.bad_request(page, BadRequest())["Content-Type"].startswith("text/html")
    monkeypatch.setattr("portal.api_errors.connection", SimpleNamespace(connection=None))
    try:  # the server closed it
        raise OperationalError("server closed the connection unexpectedly")
    except OperationalError:
        outage = errors.server_error(api)
    assert outage.status_code == 503 and outage["Retry-After"] == str(RETRY_AFTER_S)
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        assert json.loads(errors.server_error(api).content) == {
            "detail": "internal server error"}
        assert errors.server_error(page)["Content-Type"].startswith("text/html")

