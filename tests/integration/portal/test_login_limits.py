"""Failed sign-ins are limited per username and per address, on the API and the page: after 10
failures within 5 minutes the next attempt is 429 (with Retry-After) before any password is
checked; the counters are in the shared cache (Redis), not in a process."""

from __future__ import annotations

import os
import uuid

import pytest
from asgiref.local import Local
from django.contrib.auth import forms as auth_forms
from django.core.cache import caches
from django.test import Client
from rest_framework.test import APIClient

from portal import api
from portal.models import ApiToken
from tests.factories import PASSWORD, AdminFactory, UserFactory

pytestmark = pytest.mark.django_db

TOKEN = "/api/v1/auth/token"


def api_try(username, password="wrong", address="10.0.0.1"):
    return APIClient().post(TOKEN, {"username": username, "password": password},
                            format="json", REMOTE_ADDR=address)


def page_try(username, password="wrong", address="10.0.0.1"):
    return Client().post("/login/", {"username": username, "password": password},
                         REMOTE_ADDR=address)


@pytest.fixture
def hashing(monkeypatch):
    """Counts the passwords checked (each one costs a hash)."""
    calls = []
    for module in (api, auth_forms):  # the API's and the sign-in form's
        real = module.authenticate
        monkeypatch.setattr(module, "authenticate",
                            lambda *a, _real=real, **kw: calls.append(1) or _real(*a, **kw))
    return calls


def test_the_api_refuses_a_username_after_10_failures(hashing):
    UserFactory(username="mallory")
    codes = [api_try("mallory", address=f"10.0.1.{i}").status_code for i in range(200)]
    assert codes[:10] == [400] * 10 and set(codes[10:]) == {429}
    assert len(hashing) == 10  # refused guesses check no password
    response = api_try("mallory", password=PASSWORD, address="10.0.2.1")
    assert response.status_code == 429 and not ApiToken.objects.exists()
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 300 and response.json()["retry_after_s"] == wait
    assert response.json()["detail"] == (
        "Too many failed sign-ins for this username or from this address (10 within 300 s): "
        f"try again in {wait} s.")
    UserFactory(username="trent")
    assert api_try("trent", password=PASSWORD, address="10.0.2.1").status_code == 201


def test_the_api_refuses_an_address_after_10_failures():
    UserFactory(username="oscar")
    codes = [api_try(f"guess{i}", address="10.0.3.3").status_code for i in range(11)]
    assert codes == [400] * 10 + [429]
    assert api_try("oscar", password=PASSWORD, address="10.0.3.3").status_code == 429
    assert api_try("oscar", password=PASSWORD, address="10.0.3.4").status_code == 201


def test_the_page_refuses_after_10_failures_with_a_message(hashing):
    UserFactory(username="peggy")
    codes = [page_try("peggy", address=f"10.0.4.{i}").status_code for i in range(200)]
    assert codes[:10] == [200] * 10 and set(codes[10:]) == {429}
    assert len(hashing) == 10
    response = page_try("peggy", password=PASSWORD, address="10.0.5.1")
    assert response.status_code == 429 and 1 <= int(response["Retry-After"]) <= 300
    html = response.content.decode()
    assert "Too many failed sign-ins for this username or from this address" in html
    assert 'value="peggy"' in html and "_auth_user_id" not in response.client.session


def test_a_good_password_within_the_limit_signs_in():
    UserFactory(username="rita")
    for _ in range(9):
        page_try("rita")
    response = page_try("rita", password=PASSWORD)
    assert response.status_code == 302


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL")
def test_the_counters_are_shared_through_redis(settings):
    """Counted by one cache client, refused by a fresh one (as another process would be)."""
    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["REDIS_URL"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    UserFactory(username="sybil")
    assert [api_try("sybil").status_code for _ in range(10)] == [400] * 10
    caches.close_all()
    caches._connections = Local(caches.thread_critical)  # as a new process: no client yet
    assert api_try("sybil", address="10.9.9.9").status_code == 429  # its keys expire by themselves


def test_the_admins_sign_in_is_limited_too():
    AdminFactory(username="root2")
    for i in range(10):
        r = Client().post("/admin/login/", {"username": "root2", "password": "wrong"},
                          REMOTE_ADDR=f"10.0.6.{i}")
        assert r.status_code == 200
    right = Client()
    response = right.post("/admin/login/?next=/admin/", {"username": "root2", "password": PASSWORD},
                          REMOTE_ADDR="10.0.7.1")
    assert response.status_code == 200 and "_auth_user_id" not in right.session
    assert api_try("root2", password=PASSWORD, address="10.0.7.2").status_code == 429


def test_failures_count_across_the_api_and_the_page():
    UserFactory(username="uli")
    for i in range(5):
        assert api_try("uli", address=f"10.0.8.{i}").status_code == 400
        assert page_try("uli", address=f"10.0.9.{i}").status_code == 200
    assert page_try("uli", password=PASSWORD, address="10.0.9.99").status_code == 429
