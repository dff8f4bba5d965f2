"""The scheduling admin (scheduling/admin.py): the outbox's undelivered rows, with their
errors, and retrying them now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.models import OutboxKind, OutboxMessage

pytestmark = pytest.mark.django_db


def test_an_admin_sees_undelivered_rows_and_retries_them_now(world):
    now = timezone.now()
    stuck = OutboxMessage.objects.create(
        kind=OutboxKind.DISPATCH, cluster=world.bj, created_at=now, attempts=7,
        next_attempt_at=now + timedelta(minutes=5), last_error="BackendError: HTTP 503: down")
    OutboxMessage.objects.create(kind=OutboxKind.DISPATCH, cluster=world.sh, created_at=now,
                                 next_attempt_at=now, delivered_at=now)
    client = Client()
    client.force_login(world.admin)
    url = "/admin/scheduling/outboxmessage/"
    page = client.get(url, {"delivered_at__isempty": "1"})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert "HTTP 503: down" in page.content.decode()
    client.post(url, {"action": "retry_now", "_selected_action": [stuck.pk]})
    stuck.refresh_from_db()
    assert stuck.next_attempt_at <= timezone.now() and stuck.attempts == 7
