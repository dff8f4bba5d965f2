"""Two concurrent tree changes that each fit alone but not together: one must be refused."""

import threading
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connections

from core.db import postgres
from quotas.models import Queue
from quotas.services import queue_create
from quotas.tree_rules import QuotaSpec
from tests.factories import FlavorFactory

A = ("a100-80g", "gpu")


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_cannot_both_pass_v2():
    if not postgres():
        pytest.skip("the tree lock is a PostgreSQL advisory lock")
    FlavorFactory(name="a100-80g")
    rd = queue_create(name="rd", quota={A: QuotaSpec(Decimal(16))}).queue
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create(name: str) -> None:
        try:
            barrier.wait()
            queue_create(name=name, parent=rd, quota={A: QuotaSpec(Decimal(10), None,
                                                                    Decimal(10))})
            outcomes.append("saved")
        except ValidationError as exc:
            outcomes.append(exc.messages[0])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["rd: a100-80g/gpu: children's min 20 > min 16", "saved"]
    assert Queue.objects.filter(parent=rd).count() == 1
