"""Billing fixtures: a team in a cost center, GPU and CPU rates, workloads with admissions."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.services import cost_center_create, rate_card_create, team_cost_center_set
from quotas.models import Flavor, Queue
from scheduling.models import Admission, Cluster, PriorityClass, Workload
from tests.factories import TeamFactory, TeamMembershipFactory, UserFactory

# A fixed past hour, so every test's hours are complete.
H = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def world(db):
    """Flavors a100 (GPU) and cpu, a leaf queue, a team in cost center rd, rates from T0."""
    a100 = Flavor.objects.create(name="a100", gpu_memory_gib=80)
    cpu = Flavor.objects.create(name="cpu")
    root = Queue.objects.create(name="rd")
    leaf = Queue.objects.create(name="vision", parent=root, namespace="rd-vision")
    team = TeamFactory(name="vision")
    team.queues.add(leaf)
    user = UserFactory(username="alice")
    TeamMembershipFactory(team=team, user=user)
    cc = cost_center_create(code="rd", name="R&D", contact_email="finance@example.org")
    team_cost_center_set(team=team, cost_center=cc)
    rate_card_create(flavor=a100, resource="gpu", rate=Decimal("2.50"),
                     frozen_rate=Decimal("1.00"), effective_from=T0)
    rate_card_create(flavor=cpu, resource="cpu", rate=Decimal("0.04"), effective_from=T0)
    rate_card_create(flavor=cpu, resource="memory", rate=Decimal("0.005"), effective_from=T0)
    cluster = Cluster.objects.create(name="bj")
    pc, _ = PriorityClass.objects.get_or_create(name="training", defaults={"value": 1000})
    return {"a100": a100, "cpu": cpu, "leaf": leaf, "team": team, "user": user, "cc": cc,
            "cluster": cluster, "pc": pc}


@pytest.fixture
def admit(world):
    """admit(gpus=, reserved=, running=, ended=, flavor=, workload=) -> Admission."""

    def make(*, gpus=8, reserved, running=None, ended=None, flavor="a100", cpu="0", mem="0",
             workload=None, name="train", team=None):
        if workload is None:
            workload = Workload.objects.create(
                name=name, queue=world["leaf"], team=team or world["team"],
                owner=world["user"], priority_class=world["pc"], submitted_at=reserved,
                state_changed_at=reserved, duration_hint_s=4 * 3600,
                state="running" if ended is None else "finished",
            )
        return Admission.objects.create(
            workload=workload, cluster=world["cluster"], flavor=world[flavor],
            nodes=["n1"], gpus=gpus, cpu=Decimal(cpu), memory_gib=Decimal(mem),
            reserved_at=reserved, running_at=running, ended_at=ended,
        )

    return make


def minutes(n):
    return timedelta(minutes=n)


@pytest.fixture
def now():
    return timezone.now()
