"""What the services send to the workers (scheduling/enqueue.py): the cycle's nudges are
debounced; no nudge raises when the broker is down."""

from __future__ import annotations

from unittest import mock

import pytest

from scheduling import enqueue, services
from tests.integration.scheduling.conftest import body

pytestmark = pytest.mark.django_db


def test_nudges_are_debounced(org, classes, django_capture_on_commit_callbacks):
    """Many submissions in a row send one nudge to the broker, not one each."""
    enqueue._next_nudge_eta = 0.0
    with mock.patch("scheduling.tasks.scheduling_cycle.apply_async") as send, \
            mock.patch.object(enqueue, "_NUDGE_WINDOW_S", 600.0):
        for i in range(20):
            with django_capture_on_commit_callbacks(execute=True):
                services.workload_submit(user=org["alice"], data=body(f"n{i}"))
    assert send.call_count == 1
    assert send.call_args.kwargs["kwargs"] == {"nudged": True}
    enqueue._next_nudge_eta = 0.0


def test_nudges_never_raise_when_the_broker_is_down(caplog):
    from kombu.exceptions import OperationalError

    enqueue._next_nudge_eta = 0.0
    down = OperationalError("[Errno 111] Connection refused")
    with mock.patch("scheduling.tasks.scheduling_cycle.apply_async", side_effect=down), \
            mock.patch("scheduling.tasks.deliver_outbox.apply_async", side_effect=down) as send:
        enqueue.cycle_nudge()
        enqueue.outbox_nudge()
    assert send.call_count == 1
    assert "could not nudge the scheduling cycle" in caplog.text
    assert "could not nudge the outbox delivery" in caplog.text
    enqueue._next_nudge_eta = 0.0


def test_a_nudge_with_the_broker_down_costs_the_request_one_attempt_only(caplog):
    """Nudges run in the request after its commit: with the broker refusing connections each
    one fails at once instead of retrying the publish (0.6 s each, which piled up into
    answers of 10 s under load in the fault suite)."""
    import socket
    import time

    from portal.celery import app
    from tests.integration.scheduling.stack.stack import restore_app_broker

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    previous = app.conf.broker_url
    restore_app_broker(f"redis://127.0.0.1:{port}/0")
    try:
        t0 = time.monotonic()
        for _ in range(3):
            enqueue._next_nudge_eta = 0.0
            enqueue.cycle_nudge()
            enqueue.outbox_nudge()
        took = time.monotonic() - t0
    finally:
        restore_app_broker(previous)
        enqueue._next_nudge_eta = 0.0
    assert "could not nudge the outbox delivery" in caplog.text
    assert took < 1.0, f"6 nudges with the broker down took {took:.2f} s"
