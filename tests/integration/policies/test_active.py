"""The policies in force: a change to a policy is seen by the next submission, and a check
inside the transaction that wrote it reads the policies afresh."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from policies.models import TeamApproval


def _check(org, gpus=8):
    from policies.submission import policy_submission_check
    from scheduling.extensions import SubmissionContext

    data = {"name": "sweep", "queue": "rd/team-a",
            "pods": [{"count": 1, "flavors": ["h100-80g"], "gpus": gpus}]}
    return policy_submission_check(SubmissionContext(
        user=org.alice, queue=org.team_a, team=org.teams["team-a"], request=data))


RULE = {"name": "cap", "kind": "validate", "mode": "enforce", "rule": "request.gpus <= 8",
        "message": '"at most 8 GPUs, asked " + string(request.gpus)'}


def test_policy_changes_are_seen_by_the_next_submission(org):
    from policies.models import Policy
    from policies.services import policy_create, policy_delete, policy_update

    assert _check(org, 16) is None
    policy_create(user=org.admin, data=RULE)
    assert [m for _, m in _check(org, 16).deny] == ["at most 8 GPUs, asked 16 (policy cap)"]
    policy = Policy.objects.get(name="cap")
    policy_update(user=org.admin, policy=policy, data={**RULE, "rule": "request.gpus <= 16"})
    assert _check(org, 16).deny == []
    second = policy_create(user=org.admin, data={
        **RULE, "name": "h100", "rule": '"h100" in team.approvals', "message": '"no h100"'})
    assert [m for _, m in _check(org).deny] == ["no h100 (policy h100)"]
    TeamApproval.objects.create(team=org.teams["team-a"], name="h100")
    assert _check(org).deny == []
    policy_delete(user=org.admin, policy=second)
    policy_delete(user=org.admin, policy=Policy.objects.get(name="cap"))
    assert _check(org, 64) is None


def test_a_check_inside_the_writing_transaction_reads_afresh(org):
    """Writes of the current transaction are seen at once (and not cached: it may roll back)."""
    from policies.services import policy_create

    policy_create(user=org.admin, data=RULE)
    _check(org)
    with CaptureQueriesContext(connection) as queries:
        _check(org)
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    # the change log check, then the policies this transaction wrote
    assert len(reads) == 2 and "policies_change" in reads[0]
