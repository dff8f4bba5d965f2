"""Fixtures shared by the scheduling tests of several modules.

- The organisation of world.py (`world`), and as the cycle, dispatch and sync tests want it;
  a fake backend per cluster; the tasks sent to the broker recorded instead.
- The API tests' organisation (`org`, tests/integration/api/conftest.py), its priority
  classes, alice's API client (a real token) and a submission body for it (`body`).
"""

from __future__ import annotations

import pytest

from scheduling.backends import registry
from scheduling.models import PriorityClass
from tests.integration.api import conftest as api_conftest
from tests.integration.api.conftest import client_for
from tests.integration.scheduling.fakes import FakeBackend
from tests.integration.scheduling.world import make_world


@pytest.fixture
def world():
    """The organisation of world.py (the modules using it are marked django_db)."""
    return make_world()


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


# The API tests' organisation, a fixture here too (tests/integration/api/conftest.py).
org = api_conftest.org


@pytest.fixture
def classes(db):
    for name, value, can in (("inference-high", 10000, True), ("training", 1000, False),
                             ("batch-low", 100, False)):
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value,
                                                                 "can_preempt": can})


@pytest.fixture
def alice(org, classes):
    return client_for(org["alice"])


def body(name: str, *, gpus: int = 1, count: int = 1, **extra):
    out = {"name": name, "queue": "rd/vision", "priority_class": "training",
           "duration_hint_s": 3600, "image": "registry.local/train:1.4",
           "command": ["python", "train.py"], "labels": {"team": "vision"},
           "pods": [{"count": count, "flavors": ["a100-80g"], "gpus": gpus, "cpu": "4.5",
                     "memory_gib": 16}]}
    out.update(extra)
    return out
