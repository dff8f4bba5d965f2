"""A small organisation for the portal tests: one department, two teams, a fleet."""

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from portal.models import ApiToken, token_generate, token_hash
from quotas.models import Team, TeamMembership, TeamRole
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    FlavorFactory,
    NodeFactory,
    QueueFactory,
    QuotaEntryFactory,
    UserFactory,
)


class Org:
    """Handles on what the `org` fixture built."""


@pytest.fixture
def org(db):
    o = Org()
    o.a100 = FlavorFactory(name="a100-80g", gpu_memory_gib=80)
    o.rd = QueueFactory(name="rd")
    o.vision = QueueFactory(name="vision", parent=o.rd, namespace="rd-vision")
    o.nlp = QueueFactory(name="nlp", parent=o.rd, namespace="rd-nlp")
    QuotaEntryFactory(queue=o.rd, flavor=o.a100, min=Decimal(32), max=Decimal(64))
    o.vision_q = QuotaEntryFactory(queue=o.vision, flavor=o.a100, min=Decimal(8),
                                   max=Decimal(32))
    QuotaEntryFactory(queue=o.nlp, flavor=o.a100, min=Decimal(8), max=Decimal(32))
    o.cluster = ClusterFactory(name="bj")
    for i in range(4):
        NodeFactory(cluster=o.cluster, name=f"bj-a100-{i}", flavor=o.a100, gpus=8)
    o.vision_team = Team.objects.create(name="vision", department=o.rd)
    o.vision_team.queues.add(o.vision)
    o.nlp_team = Team.objects.create(name="nlp", department=o.rd)
    o.nlp_team.queues.add(o.nlp)
    o.alice = UserFactory(username="alice")
    o.bob = UserFactory(username="bob")  # lead of vision
    o.carol = UserFactory(username="carol")  # researcher in nlp
    o.admin = AdminFactory(username="root")
    TeamMembership.objects.create(team=o.vision_team, user=o.alice, role=TeamRole.RESEARCHER)
    TeamMembership.objects.create(team=o.vision_team, user=o.bob, role=TeamRole.LEAD)
    TeamMembership.objects.create(team=o.nlp_team, user=o.carol, role=TeamRole.RESEARCHER)
    return o


def api_for(user) -> APIClient:
    """An API client authenticated with a real hashed token, as automation would be."""
    raw = token_generate()
    ApiToken.objects.create(user=user, key_hash=token_hash(raw), prefix=raw[:8])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


@pytest.fixture
def priority_classes(db):
    """The seeded defaults (a data migration; tests may run without migrations)."""
    from scheduling.models import PriorityClass

    for name, value, can in (("inference-high", 10000, True), ("training", 1000, False),
                             ("batch-low", 100, False)):
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value,
                                                                 "can_preempt": can})


def submission(**over):
    """A valid workload submission (the API's JSON shape) for rd/vision."""
    data = {"name": "resnet", "queue": "rd/vision", "priority_class": "training",
            "preemptible": True, "checkpoint": True, "image": "registry.local/train:1.4",
            "command": ["python", "train.py"], "duration_hint_s": 3600,
            "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 4, "cpu": 16,
                      "memory_gib": 128}]}
    data.update(over)
    return data


def submit(user, **over):
    """Submit through the real service, without nudging a cycle."""
    from scheduling.services import workload_submit

    return workload_submit(user=user, data=submission(**over), nudge=False)


def held(user, **over):
    """A submission held for approval (submitted, then marked as waiting for it)."""
    from scheduling.models import Workload

    w = submit(user, **over)
    Workload.objects.filter(pk=w.pk).update(needs_approval=True)
    return w


def pod_rows(*rows, initial=None):
    """The request form's pod-set rows (a formset with the `pods` prefix) as POST data."""
    data = {"pods-TOTAL_FORMS": str(len(rows)),
            "pods-INITIAL_FORMS": str(len(rows) if initial is None else initial),
            "pods-MIN_NUM_FORMS": "1", "pods-MAX_NUM_FORMS": "8"}
    for i, row in enumerate(rows):
        data.update({f"pods-{i}-{k}": v for k, v in row.items()})
    return data
