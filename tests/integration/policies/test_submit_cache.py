"""A submission's own reads cached on the change log (core.changes): the queue
lookups, the priority classes and flavors, the budgets in force and the engine's impossibility
check. A warm submission reads only the change log; every committed change to what those come
from is seen by the next submission, in this process and when another process made it."""

import itertools
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas.models import QuotaEntry, TeamMembership
from scheduling.models import Node, PriorityClass
from scheduling.services import workload_submit
from tests.factories import quota_update

from .test_cache import _other_process

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="the change log is PostgreSQL's")


_names = itertools.count()


def submit(org, gpus=8, *, count=1, name="", priority_class="training", topology=None):
    # names are unique among a queue's open workloads
    data = {"name": name or f"w{next(_names)}", "queue": "rd/team-a",
            "priority_class": priority_class,
            "pods": [{"count": count, "flavors": ["a100-80g"], "gpus": gpus}]}
    if topology:
        data["topology"] = topology
    return workload_submit(user=org.alice, data=data, nudge=False)


def test_a_warm_submission_reads_only_the_change_log(torg):
    submit(torg, name="cold")
    with CaptureQueriesContext(connection) as queries:
        workload = submit(torg, name="warm")
    assert workload.state == "pending"
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT")]
    assert len(reads) == 1 and "policies_changes_since" in reads[0], reads
    # BEGIN, the change log, the insert (workload, pod sets, events in one statement), COMMIT
    assert len(queries) == 4, [q["sql"][:60] for q in queries]


def test_quota_and_fleet_changes_are_seen_by_the_next_submission(torg):
    org = torg
    assert submit(org, 8, count=4).state == "pending"
    quota_update(QuotaEntry.objects.filter(queue=org.team_a), max=Decimal(24))
    rejected = submit(org, 8, count=4)
    assert rejected.state == "rejected" and rejected.reason_code == "QUOTA_MAX"
    assert "24" in rejected.reason_message
    quota_update(QuotaEntry.objects.filter(queue=org.team_a), max=Decimal(64))
    assert submit(org, 8, count=4).state == "pending"
    Node.objects.filter(name__startswith="sh-1-a100").update(gpus=4)
    Node.objects.filter(name__startswith="bj-1-a100").update(gpus=4)
    assert submit(org, 8, count=1).state == "rejected"
    Node.objects.filter(name__startswith="bj-1-a100").update(gpus=8)
    assert submit(org, 8, count=4).state == "pending"


def test_a_node_moving_rack_is_seen_by_the_next_submission(torg):
    org = torg
    Node.objects.filter(cluster=org.north).update(rack="r1")
    Node.objects.filter(cluster=org.east).update(rack="r2")
    assert submit(org, 8, count=4, topology={"same": "rack"}).state == "pending"
    for i, node in enumerate(Node.objects.filter(name__startswith="bj-1-a100").order_by("name")):
        node.rack = f"r{10 + i}"
        node.save(update_fields=["rack"])
    Node.objects.filter(name__startswith="sh-1-a100-0").update(rack="r3")
    rejected = submit(org, 8, count=4, topology={"same": "rack"})
    assert rejected.state == "rejected"
    assert rejected.reason_code == "TOPOLOGY_UNSATISFIABLE"


def test_membership_and_class_changes_are_seen_by_the_next_submission(torg):
    org = torg
    assert submit(org).state == "pending"
    TeamMembership.objects.filter(team=org.teams["team-a"], user=org.alice).delete()
    with pytest.raises(ValidationError, match="may use queue"):
        submit(org)
    TeamMembership.objects.create(team=org.teams["team-a"], user=org.alice)
    assert submit(org).state == "pending"
    org.teams["team-a"].queues.remove(org.team_a)
    with pytest.raises(ValidationError, match="may use queue"):
        submit(org)
    org.teams["team-a"].queues.add(org.team_a)
    with pytest.raises(ValidationError):
        submit(org, priority_class="research")
    PriorityClass.objects.create(name="research", value=500, can_preempt=False)
    assert submit(org, priority_class="research").priority_class.name == "research"


def test_a_budget_firing_is_seen_by_the_next_submission(torg):
    billing = pytest.importorskip("billing.models")
    org = torg
    cc = billing.CostCenter.objects.create(code="cc-rd", name="R&D", currency="EUR")
    billing.TeamCostCenter.objects.create(team=org.teams["team-a"], cost_center=cc)
    # A budget of 0: whatever was spent is over it (a firing lifts once spend is below again).
    budget = billing.Budget.objects.create(cost_center=cc, period="monthly",
                                           amount=Decimal("0"))
    threshold = billing.BudgetThreshold.objects.create(budget=budget, percent=100,
                                                       action="block")
    assert submit(org).state == "pending"
    now = timezone.now()
    billing.BudgetFiring.objects.create(
        threshold=threshold, period_start=now - timedelta(days=1),
        period_end=now + timedelta(days=1), spent=Decimal("1000"),
        budget_amount=Decimal("1000"), message="spent", fired_at=now)
    blocked = submit(org)
    assert blocked.state == "rejected" and blocked.reason_code == "BUDGET_EXCEEDED"
    billing.Budget.objects.filter(pk=budget.pk).update(active=False)
    assert submit(org).state == "pending"


def test_changes_made_by_another_process_are_seen_by_the_next_submission(torg):
    org = torg
    assert submit(org).state == "pending"
    _other_process("""
        from quotas.models import TeamMembership
        TeamMembership.objects.filter(team__name="team-a", user__username="alice").delete()
    """)
    with pytest.raises(ValidationError, match="may use queue"):
        submit(org)
    _other_process("""
        from decimal import Decimal
        from quotas.models import QuotaEntry, Team, TeamMembership
        from django.contrib.auth import get_user_model
        TeamMembership.objects.create(team=Team.objects.get(name="team-a"),
                                      user=get_user_model().objects.get(username="alice"))
        from tests.factories import quota_update
        quota_update(QuotaEntry.objects.filter(queue__path="rd/team-a"), max=Decimal(16))
    """)
    rejected = submit(org, 8, count=3)
    assert rejected.state == "rejected" and rejected.reason_code == "QUOTA_MAX"
