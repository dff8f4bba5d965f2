"""The 7-day replay: what a policy would have done to the last days' submissions."""

from datetime import timedelta

from policies.selectors import policy_replay
from policies.services import (
    policy_create,
    policy_to_spec,
    policy_update,
    team_approval_grant,
)

from .conftest import NOW


def test_replay_of_the_last_7_days(org):
    team_approval_grant(user=org.admin, team=org.teams["vision"], name="h100")
    org.pending(org.team_a, 8, name="a-h100", flavors=["h100-80g"], at=NOW - timedelta(days=1))
    org.pending(org.vision, 8, name="v-h100", flavors=["h100-80g"], at=NOW - timedelta(days=2))
    org.pending(org.team_b, 8, name="b-a100", at=NOW - timedelta(days=3))
    org.pending(org.team_b, 8, name="old-h100", flavors=["h100-80g"],
                at=NOW - timedelta(days=9))
    policy = policy_create(user=org.admin, data={
        "name": "h100", "kind": "validate", "mode": "off",
        "match": 'request.flavors.exists(f, f.startsWith("h100"))',
        "rule": '"h100" in team.approvals',
        "message": '"team " + team.name + " lacks the h100 approval"'})
    report = policy_replay(policy_to_spec(policy), now=NOW)
    assert (report.replayed, report.matched, report.denied) == (3, 2, 1)
    assert [(h.name, h.message) for h in report.hits] == [
        ("a-h100", "team team-a lacks the h100 approval")]
    canary = policy_update(user=org.admin, policy=policy, data={"scope": ["rd/team-b"]})
    assert policy_replay(policy_to_spec(canary), now=NOW).denied == 0


def test_replay_uses_the_submission_time(org):
    org.pending(org.team_a, 8, name="night", at=NOW.replace(hour=2))
    org.pending(org.team_a, 8, name="day", at=NOW.replace(hour=14))
    policy = policy_create(user=org.admin, data={
        "name": "no-nights", "kind": "validate", "rule": "now.hour >= 6"})
    report = policy_replay(policy_to_spec(policy), now=NOW + timedelta(hours=5))
    assert [h.name for h in report.hits] == ["night"]
