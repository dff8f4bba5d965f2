"""The one-query submission context equals what the separate ORM queries build, and a write
to any piece it reads is seen by the very next submission (nothing of it is cached)."""

from datetime import timedelta
from unittest import mock

from django.db import connection
from django.test.utils import CaptureQueriesContext

from policies import context
from policies.context import submission_variables
from policies.models import TeamApproval
from scheduling.models import Node
from tests.factories import QuotaEntryFactory, quota_update

from .conftest import NOW

NEEDS = {"queue", "team", "fleet"}


def _both(org, queue, team):
    one = submission_variables(data={"name": "x"}, queue=queue, team=team, user=org.alice,
                               now=NOW, needs=NEEDS)
    with mock.patch.object(context, "submission_rows", return_value=None):
        orm = submission_variables(data={"name": "x"}, queue=queue, team=team, user=org.alice,
                                   now=NOW, needs=NEEDS)
    return one, orm


def test_one_query_context_equals_the_orm_context(org):
    team = org.teams["team-a"]
    org.admit(org.team_a, 16)
    org.admit(org.team_b, 8, cluster=org.east, name="other")
    QuotaEntryFactory(queue=org.team_a, flavor=org.h100, min=2, max=None)
    TeamApproval.objects.create(team=team, name="h100")
    TeamApproval.objects.create(team=team, name="old", expires_at=NOW - timedelta(days=1))
    TeamApproval.objects.create(team=team, name="later", expires_at=NOW + timedelta(days=1))
    one, orm = _both(org, org.team_a, team)
    assert one == orm
    assert one["team"]["approvals"] == ["h100", "later"]
    assert one["team"]["department"] == "rd"
    assert one["queue"]["used"]["a100-80g/gpu"] == 16
    assert one["queue"]["max"]["a100-80g/gpu"] == 40
    assert one["queue"]["min"]["h100-80g/gpu"] == 2
    assert one["fleet"]["capacity"] == {"a100-80g": 64, "h100-80g": 8}
    assert one["fleet"]["used"]["a100-80g"] == 24
    assert [c["name"] for c in one["fleet"]["clusters"]] == ["bj-1", "sh-1"]


def test_the_team_and_fleet_pieces_take_one_query(org):
    team = org.teams["team-a"]
    with CaptureQueriesContext(connection) as queries:
        submission_variables(data={}, queue=org.team_a, team=team, user=org.alice, now=NOW,
                             needs=NEEDS)
    assert len(queries) == 1


def test_a_write_is_seen_by_the_next_submission(org):
    team = org.teams["team-a"]
    first = submission_variables(data={}, queue=org.team_a, team=team, user=org.alice,
                                 now=NOW, needs=NEEDS)
    assert first["team"]["approvals"] == []
    TeamApproval.objects.create(team=team, name="h100")
    Node.objects.filter(flavor=org.h100).update(ready=False)
    quota_update(org.team_a.quotas.filter(flavor=org.a100), max=24)
    org.admit(org.team_a, 8)
    second = submission_variables(data={}, queue=org.team_a, team=team, user=org.alice,
                                  now=NOW, needs=NEEDS)
    assert second["team"]["approvals"] == ["h100"]
    assert second["fleet"]["capacity"] == {"a100-80g": 64}
    assert second["queue"]["max"]["a100-80g/gpu"] == 24
    assert second["queue"]["used"]["a100-80g/gpu"] == 8


def test_a_team_without_department_or_approvals(org):
    team = org.teams["vision"]
    team.department = None
    team.save()
    one, orm = _both(org, org.vision, team)
    assert one == orm
    assert one["team"]["department"] == "" and one["team"]["approvals"] == []


def test_the_cost_center_is_the_teams_own_else_the_default(org):
    from billing.models import CostCenter, TeamCostCenter

    needs = {"cost_center"}

    def cc_of(team):
        one = submission_variables(data={}, queue=org.team_a, team=team, user=org.alice,
                                   now=NOW, needs=needs)["cost_center"]
        with mock.patch.object(context, "submission_rows", return_value=None):
            orm = submission_variables(data={}, queue=org.team_a, team=team, user=org.alice,
                                       now=NOW, needs=needs)["cost_center"]
        assert one == orm
        return one["name"], one["currency"]

    team_a, team_b = org.teams["team-a"], org.teams["team-b"]
    assert cc_of(team_a) == ("", "")
    CostCenter.objects.create(code="cc-default", name="Default", currency="USD", is_default=True)
    assert cc_of(team_a) == ("cc-default", "USD")
    own = CostCenter.objects.create(code="cc-rd", name="R&D", currency="EUR")
    TeamCostCenter.objects.create(team=team_a, cost_center=own)
    assert cc_of(team_a) == ("cc-rd", "EUR")
    assert cc_of(team_b) == ("cc-default", "USD")
