"""A small organisation for the history tests: rd -> vision, nlp; teams, a lead, a fleet."""

from decimal import Decimal

import pytest

from quotas.models import QuotaEntry, Team, TeamMembership, TeamRole
from quotas.services import queue_create
from quotas.tree_rules import QuotaSpec
from tests.factories import AdminFactory, ClusterFactory, FlavorFactory, NodeFactory, UserFactory
from tests.integration.portal.conftest import api_for  # noqa: F401 (the history tests import it from here)

A = ("a100-80g", "gpu")


class Org:
    """Handles on what the `org` fixture built."""


@pytest.fixture
def org(db):
    """rd (a100 min 16, max 32, lendable 8) -> vision (min 8), nlp (min 4); alice researches
    and bob leads in vision, carol researches in nlp; root is a platform admin."""
    o = Org()
    o.a100 = FlavorFactory(name="a100-80g", gpu_memory_gib=80)
    o.rd = queue_create(name="rd", quota={A: QuotaSpec(Decimal(16), Decimal(32),
                                                       Decimal(8))}).queue
    o.vision = queue_create(name="vision", parent=o.rd, quota={A: QuotaSpec(Decimal(8))}).queue
    o.nlp = queue_create(name="nlp", parent=o.rd, quota={A: QuotaSpec(Decimal(4))}).queue
    o.vision_entry = QuotaEntry.objects.get(queue=o.vision)
    o.nlp_entry = QuotaEntry.objects.get(queue=o.nlp)
    o.cluster = ClusterFactory(name="bj")
    for i in range(2):
        NodeFactory(cluster=o.cluster, name=f"bj-a100-{i}", flavor=o.a100, gpus=8)
    o.vision_team = Team.objects.create(name="vision", department=o.rd)
    o.vision_team.queues.add(o.vision)
    o.nlp_team = Team.objects.create(name="nlp", department=o.rd)
    o.nlp_team.queues.add(o.nlp)
    o.alice = UserFactory(username="alice")
    o.bob = UserFactory(username="bob")
    o.carol = UserFactory(username="carol")
    o.admin = AdminFactory(username="root")
    TeamMembership.objects.create(team=o.vision_team, user=o.alice, role=TeamRole.RESEARCHER)
    TeamMembership.objects.create(team=o.vision_team, user=o.bob, role=TeamRole.LEAD)
    TeamMembership.objects.create(team=o.nlp_team, user=o.carol, role=TeamRole.RESEARCHER)
    return o


def history(client, **params):
    """GET /api/v1/history with the filters given; the JSON body (asserting a 200)."""
    response = client.get("/api/v1/history", params)
    assert response.status_code == 200, response.content
    return response.json()


def changes(entry) -> dict[str, tuple[str, str]]:
    """An entry's changes as {field: (before_text, after_text)}."""
    return {c["field"]: (c["before_text"], c["after_text"]) for c in entry["changes"]}
