"""What a submission looks up (scheduling/request/lookups.py): the queues of a batch in one
read, and the team accounted from the grants of the queue and its ancestors."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import Queue
from scheduling import services
from tests.integration.scheduling.conftest import body

pytestmark = pytest.mark.django_db


def test_batch_submission_reads_queues_once(org, classes):
    """Ten workloads on two leaves: the queues and their teams are one query, not one each."""
    admin = org["admin"]
    items = [body(f"b{i}", queue="rd/vision" if i % 2 else "rd/nlp") for i in range(10)]
    with CaptureQueriesContext(connection) as ctx:
        out = services.workloads_submit(user=admin, items=items, nudge=False)
    assert [w.team.name for w in out] == ["nlp", "vision"] * 5
    queue_reads = [q for q in ctx.captured_queries if 'FROM "quotas_queue" q' in q["sql"]]
    assert len(queue_reads) == 1


def test_team_and_permission_from_ancestor_grants(org, classes):
    """A team granted the parent may submit to its leaves and is the team accounted; a user in
    no granted team is refused; an admin is accounted to the granting team."""
    from quotas.models import Team, TeamMembership

    rd = Queue.objects.get(path="rd")
    dept = Team.objects.create(name="dept")
    dept.queues.add(rd)
    carol = org["alice"].__class__.objects.create(username="carol")
    TeamMembership.objects.create(team=dept, user=carol)
    w = services.workload_submit(user=carol, data=body("c", queue="rd/nlp"), nudge=False)
    assert w.team.name == "dept"
    # alice is in vision (granted rd/vision): her own team wins over the department's.
    w = services.workload_submit(user=org["alice"], data=body("a"), nudge=False)
    assert w.team.name == "vision"
    dave = org["alice"].__class__.objects.create(username="dave")
    with pytest.raises(ValidationError, match="none of your teams may use"):
        services.workload_submit(user=dave, data=body("d"), nudge=False)
    w = services.workload_submit(user=org["admin"], data=body("x", queue="rd/nlp"),
                                 nudge=False)
    assert w.team.name == "nlp"
