"""An organisation for the policy tests: rd with team-a, team-b, vision; east and north."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from quotas.models import Team, TeamMembership
from scheduling.models import Admission, PodSet, PriorityClass, Workload
from tests.factories import (
    AdminFactory,
    ClusterFactory,
    FlavorFactory,
    NodeFactory,
    QueueFactory,
    QuotaEntryFactory,
    UserFactory,
)

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


class Org:
    """Handles on what the `org` fixture built."""

    def admit(self, queue, gpus, *, cluster=None, name="running", at=NOW):
        """A running workload holding `gpus` A100 cards in `queue` (open admission)."""
        team = self.teams.get(queue.name)
        workload = Workload.objects.create(
            name=name, queue=queue, team=team, owner=self.alice, state="running",
            priority_class=PriorityClass.objects.get(name="training"), submitted_at=at,
            state_changed_at=at,
        )
        PodSet.objects.create(workload=workload, index=0, count=gpus // 8 or 1,
                              flavors=["a100-80g"], gpus=min(8, gpus))
        Admission.objects.create(
            workload=workload, cluster=cluster or self.north, flavor=self.a100,
            nodes=["n"] * (gpus // 8 or 1), gpus=gpus, reserved_at=at, running_at=at,
        )
        return workload

    def pending(self, queue, gpus, *, name="waiting", labels=None, at=NOW, flavors=None):
        """A pending workload in `queue`."""
        workload = Workload.objects.create(
            name=name, queue=queue, team=self.teams.get(queue.name), owner=self.alice,
            state="pending", priority_class=PriorityClass.objects.get(name="training"),
            submitted_at=at, state_changed_at=at, labels=labels or {},
        )
        PodSet.objects.create(workload=workload, index=0, count=1,
                              flavors=flavors or ["a100-80g"], gpus=gpus)
        return workload


@pytest.fixture
def org(db):
    return build_org()


@pytest.fixture
def torg(transactional_db):
    """`org`, committed (each write is its own transaction), for cache and process tests."""
    from core import changes

    changes.reset()
    yield build_org()
    changes.reset()


def _seed_priority_classes():
    import importlib

    from django.apps import apps

    seed = importlib.import_module("scheduling.migrations.0003_seed_priority_classes").seed
    seed(apps, None)


def build_org():
    # A transactional test's flush empties every table, the seeded priority classes included.
    _seed_priority_classes()
    o = Org()
    o.a100 = FlavorFactory(name="a100-80g", gpu_memory_gib=80)
    o.h100 = FlavorFactory(name="h100-80g", gpu_memory_gib=80)
    o.rd = QueueFactory(name="rd")
    o.team_a = QueueFactory(name="team-a", parent=o.rd, namespace="rd-team-a")
    o.team_b = QueueFactory(name="team-b", parent=o.rd, namespace="rd-team-b")
    o.vision = QueueFactory(name="vision", parent=o.rd, namespace="rd-vision")
    QuotaEntryFactory(queue=o.rd, flavor=o.a100, min=Decimal(0), max=Decimal(64))
    QuotaEntryFactory(queue=o.team_a, flavor=o.a100, min=Decimal(0), max=Decimal(40))
    o.east = ClusterFactory(name="sh-1", region="east")
    o.north = ClusterFactory(name="bj-1", region="north")
    for cluster in (o.east, o.north):
        for i in range(4):
            NodeFactory(cluster=cluster, name=f"{cluster.name}-a100-{i}", flavor=o.a100, gpus=8)
    NodeFactory(cluster=o.east, name="sh-1-h100-0", flavor=o.h100, gpus=8)
    o.alice = UserFactory(username="alice")
    o.admin = AdminFactory(username="root")
    o.teams = {}
    for queue in (o.team_a, o.team_b, o.vision):
        team = Team.objects.create(name=queue.name, department=o.rd)
        team.queues.add(queue)
        TeamMembership.objects.create(team=team, user=o.alice)
        o.teams[queue.name] = team
    return o


@pytest.fixture
def admin_api(org):
    client = APIClient()
    client.force_authenticate(org.admin)
    return client


@pytest.fixture
def user_api(org):
    client = APIClient()
    client.force_authenticate(org.alice)
    return client


@pytest.fixture(autouse=True)
def _counts_at_once(settings):
    """Hit counters written right after each commit (the default buffers them for a second)."""
    settings.ALLOT_POLICY_COUNTS_FLUSH_S = 0


@pytest.fixture(autouse=True)
def _priority_classes_seeded(request):
    """The seeded priority classes, even after another test's flush emptied the tables."""
    names = set(request.fixturenames)
    if "transactional_db" in names:
        request.getfixturevalue("transactional_db")
    elif "db" in names or request.node.get_closest_marker("django_db"):
        request.getfixturevalue("db")
    else:
        return
    _seed_priority_classes()
