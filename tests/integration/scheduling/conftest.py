"""Fixtures shared by the scheduling tests of several modules: the organisation of world.py
as the cycle, dispatch and sync tests want it, a fake backend per cluster, and the tasks sent
to the broker recorded instead."""

from __future__ import annotations

import pytest

from scheduling.backends import registry
from tests.integration.scheduling.fakes import FakeBackend
from tests.integration.scheduling.world import make_world


@pytest.fixture
def world_dispatch_after_commit(db, settings):
    # The two phases one at a time: the cycle reserves, dispatch (a fake backend) starts.
    # (fleet/test_dispatch.py covers simulated clusters started inside the cycle.)
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": False}
    return make_world(nodes_per_cluster=2)  # bj and sh: 16 GPUs each


@pytest.fixture
def world_dispatch_in_cycle(db, settings):
    settings.ALLOT_WORKERS = {**settings.ALLOT_WORKERS, "dispatch_in_cycle": True}
    return make_world(nodes_per_cluster=2, speedup=100)


@pytest.fixture
def backends(monkeypatch):
    fakes: dict[str, FakeBackend] = {}

    def get(cluster):
        return fakes.setdefault(cluster.name, FakeBackend(cluster.name))

    monkeypatch.setattr(registry, "get_backend", get)
    return fakes


@pytest.fixture
def sent(monkeypatch):
    """Tasks these in-process tests would send to a broker, recorded instead."""
    from celery.app.task import Task

    calls: list[tuple[str, tuple, dict]] = []
    monkeypatch.setattr(Task, "apply_async",
                        lambda self, args=None, kwargs=None, **options: calls.append(
                            (self.name, tuple(args or ()), dict(options))))
    return calls
