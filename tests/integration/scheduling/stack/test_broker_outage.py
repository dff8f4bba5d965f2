"""A Celery worker (with its beat) lives through a broker outage: the broker is killed (it
keeps nothing) and started again on the same port; the worker reconnects and goes on running
its tasks, with no supervisor restarting it."""

from __future__ import annotations

import time

import pytest

from tests.chaos.servers import ThrowawayRedis
from tests.integration.scheduling.stack.stack import CeleryWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def _succeeded(worker: CeleryWorker) -> int:
    return worker.log.read_text(errors="replace").count("succeeded in")


def _send(url: str, task: str, n: int) -> None:
    from celery import Celery

    app = Celery(broker=url)
    try:
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                app.send_task(task, producer=producer)
    finally:
        app.close()


def test_a_worker_and_its_beat_live_through_a_broker_outage():
    broker = ThrowawayRedis()
    broker.start()
    worker = CeleryWorker("outage", beat=True, env={"CELERY_BROKER_URL": broker.url},
                          concurrency=1)
    try:
        worker.start()
        wait_for(lambda: _succeeded(worker) >= 2, timeout=60, what="tasks before the outage")
        # A backlog, so the worker holds a prefetched, unacknowledged message when the broker
        # dies (what Celery 5.7.0 failed on: it restores those on a connection already gone).
        _send(broker.url, "scheduling.cycle", 300)
        wait_for(lambda: _succeeded(worker) >= 5, timeout=60, what="the backlog started")
        broker.stop()
        time.sleep(4)
        assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
        broker.start()
        before = _succeeded(worker)
        wait_for(lambda: _succeeded(worker) >= before + 3, timeout=60,
                 what=f"tasks after the broker came back:\n{worker.tail()}")
        assert worker.proc.poll() is None, worker.tail()
    finally:
        worker.stop()
        broker.destroy()
