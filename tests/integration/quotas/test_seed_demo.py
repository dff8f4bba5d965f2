"""seed_demo: the demo organisation, idempotent (same data and output on a second run)."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from quotas import selectors
from quotas.models import Flavor, Queue, QuotaEntry, Team, TeamMembership
from scheduling.models import Cluster, Node

pytestmark = pytest.mark.django_db


def counts():
    return {
        "flavors": sorted(Flavor.objects.values_list("name", flat=True)),
        "queues": sorted(Queue.objects.values_list("path", "namespace", "updated_at")),
        "quotas": sorted(QuotaEntry.objects.values_list("queue__path", "flavor__name",
                                                        "resource", "min", "max", "lendable")),
        "clusters": sorted(Cluster.objects.values_list("name", "kind", "backend")),
        "nodes": Node.objects.count(),
        "teams": sorted(Team.objects.values_list("name", flat=True)),
        "members": sorted(TeamMembership.objects.values_list("user__username", "team__name",
                                                             "role")),
        "users": sorted(get_user_model().objects.values_list("username", "password")),
    }


def test_seed_demo_idempotent_and_complete():
    out1 = StringIO()
    call_command("seed_demo", stdout=out1)
    first = counts()
    out2 = StringIO()
    call_command("seed_demo", stdout=out2)
    assert counts() == first
    assert out1.getvalue() == out2.getvalue()

    assert first["flavors"] == ["a100-80g", "cpu", "h100-80g", "v100-32g"]
    assert len(first["clusters"]) == 3
    assert {k for _, k, _ in first["clusters"]} == {"on-prem", "cloud"}
    assert {b for _, _, b in first["clusters"]} == {"simulated"}
    assert len(first["teams"]) == 5
    assert [p for p, _, _ in first["queues"] if "/" not in p] == ["product", "research"]
    assert max(p.count("/") for p, _, _ in first["queues"]) == 2  # dept -> team -> project
    assert ("alice", "vision", "researcher") in first["members"]
    assert ("bob", "nlp", "lead") in first["members"]
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("allot-admin-demo")
    assert get_user_model().objects.get(username="alice").check_password("allot-alice-demo")
    text = out1.getvalue()
    assert "alice  password allot-alice-demo" in text and "bob" in text
    fleet = selectors.fleet_capacity()
    for flavor in ("a100-80g", "h100-80g", "v100-32g"):
        assert fleet[(flavor, "gpu")] > 0
    assert fleet[("cpu", "cpu")] > 0


def test_seeded_tree_is_valid_and_alice_can_submit(client):
    call_command("seed_demo", stdout=StringIO())
    from quotas.services import tree_check
    report = tree_check(selectors.tree_specs().values())
    assert report.warnings == []
    alice = get_user_model().objects.get(username="alice")
    rows = selectors.queue_rows(user=alice)
    assert sorted(r["path"] for r in rows if r["can_submit"]) == [
        "research/vision/detection", "research/vision/segmentation"
    ]
    client.force_login(alice)
    html = client.get("/tree/").content.decode()
    assert 'data-path="research/vision/detection"' in html
    home = client.get("/").content.decode()  # her dashboard: a card per queue she submits to
    assert 'href="/queues/q/research/vision/detection/"' in home
    assert 'href="/queues/q/research/vision/segmentation/"' in home
