"""A small organisation and API clients for each role."""

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from portal.services import api_token_create
from quotas.models import TeamRole
from quotas.services import queue_create
from quotas.tree_rules import QuotaSpec
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    FlavorFactory,
    NodeFactory,
    TeamFactory,
    TeamMembershipFactory,
    UserFactory,
)

A = ("a100-80g", "gpu")


@pytest.fixture
def org(db):
    """rd (a100 min 16 max 32 lendable 8) -> vision (min 8), nlp (min 4); teams and users."""
    a100 = FlavorFactory(name="a100-80g")
    FlavorFactory(name="cpu", gpu_memory_gib=None)
    bj = ClusterFactory(name="bj", region="beijing")
    for i in range(4):
        NodeFactory(cluster=bj, flavor=a100, name=f"bj-a100-{i}", ready=i != 3)
    rd = queue_create(name="rd", quota={A: QuotaSpec(Decimal(16), Decimal(32), Decimal(8))}).queue
    vision = queue_create(name="vision", parent=rd, quota={A: QuotaSpec(Decimal(8))}).queue
    nlp = queue_create(name="nlp", parent=rd, quota={A: QuotaSpec(Decimal(4))}).queue
    team_vision = TeamFactory(name="vision")
    team_vision.queues.add(vision)
    team_nlp = TeamFactory(name="nlp")
    team_nlp.queues.add(nlp)
    alice = UserFactory(username="alice")
    bob = UserFactory(username="bob")
    TeamMembershipFactory(team=team_vision, user=alice, role=TeamRole.RESEARCHER)
    TeamMembershipFactory(team=team_nlp, user=bob, role=TeamRole.LEAD)
    admin = AdminFactory(username="admin")
    return {"alice": alice, "bob": bob, "admin": admin, "rd": rd, "vision": vision, "nlp": nlp}


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        _, raw = api_token_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    return client


@pytest.fixture
def clients(org):
    return {
        "anonymous": client_for(None),
        "researcher": client_for(org["alice"]),
        "lead": client_for(org["bob"]),
        "admin": client_for(org["admin"]),
    }
