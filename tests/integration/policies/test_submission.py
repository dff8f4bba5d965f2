"""Validate and priority policies at submission: deny with the message, audit, canary scope,
grandfathering, evaluation errors both ways, priority assigned."""

import pytest
from django.test import override_settings

from policies.models import Policy, PolicyViolation
from policies.services import policy_create, team_approval_grant
from policies.submission import policy_submission_check
from scheduling.extensions import SubmissionContext

H100 = {
    "name": "h100-approved", "kind": "validate", "mode": "enforce",
    "match": 'request.flavors.exists(f, f.startsWith("h100"))',
    "rule": '"h100" in team.approvals',
    "message": '"H100s need the h100 approval: team " + team.name + " asked for "'
               ' + string(request.gpus) + " GPUs"',
}


def request(queue="rd/team-a", flavors=("h100-80g",), gpus=8, **extra):
    return {"name": "sweep", "queue": queue, "priority_class": "training",
            "pods": [{"count": 1, "flavors": list(flavors), "gpus": gpus}], **extra}


def check(org, data, *, queue=None, is_update=False):
    queue = queue or org.team_a
    return policy_submission_check(SubmissionContext(
        user=org.alice, queue=queue, team=org.teams[queue.name], request=data,
        is_update=is_update))


def test_no_policies_no_verdict(org):
    assert check(org, request()) is None


def test_validate_denies_with_the_message_and_records_it(org, django_capture_on_commit_callbacks):
    policy_create(user=org.admin, data=H100)
    with django_capture_on_commit_callbacks(execute=True):
        verdict = check(org, request())
    assert verdict.deny == [("POLICY_DENIED", "H100s need the h100 approval: team team-a asked "
                             "for 8 GPUs (policy h100-approved)")]
    violation = PolicyViolation.objects.get()
    assert (violation.outcome, violation.mode, violation.subject) == ("denied", "enforce", "sweep")
    assert violation.user == org.alice and violation.queue_path == "rd/team-a"
    assert violation.input["request"]["flavors"] == ["h100-80g"]
    assert violation.input["team"] == {"name": "team-a", "display_name": "team-a",
                                       "department": "rd", "approvals": []}
    assert violation.expression == H100["rule"]
    policy = Policy.objects.get()
    assert (policy.hits, policy.denials) == (1, 1)


def test_validate_allows_an_approved_team(org, django_capture_on_commit_callbacks):
    policy_create(user=org.admin, data=H100)
    team_approval_grant(user=org.admin, team=org.teams["team-a"], name="h100")
    with django_capture_on_commit_callbacks(execute=True):
        verdict = check(org, request())
    assert verdict.deny == [] and verdict.audit == []
    assert (Policy.objects.get().hits, Policy.objects.get().denials) == (1, 0)


def test_audit_mode_records_the_violation_and_allows(org):
    policy_create(user=org.admin, data={**H100, "mode": "audit"})
    verdict = check(org, request())
    assert verdict.deny == []
    assert verdict.audit == ["policy h100-approved (audit): audited: H100s need the h100 "
                             "approval: team team-a asked for 8 GPUs"]
    violation = PolicyViolation.objects.get()
    assert (violation.outcome, violation.mode) == ("audited", "audit")


def test_canary_scope_enforces_on_one_subtree_only(org):
    policy_create(user=org.admin, data={**H100, "scope": ["rd/team-a"]})
    assert check(org, request()).deny
    # out of the canary's scope: no policy applies, so no verdict at all
    assert check(org, request(queue="rd/team-b"), queue=org.team_b) is None


def test_update_that_does_not_grow_is_grandfathered(org):
    policy_create(user=org.admin, data=H100)
    existing = org.pending(org.team_a, 8, flavors=["h100-80g"])
    verdict = check(org, request(workload_id=existing.pk), is_update=True)
    assert verdict.deny == []
    assert verdict.audit[0].startswith("policy h100-approved (enforce): grandfathered: H100s")
    assert PolicyViolation.objects.get().outcome == "grandfathered"


def test_update_that_grows_is_denied(org):
    policy_create(user=org.admin, data=H100)
    existing = org.pending(org.team_a, 8, flavors=["h100-80g"])
    verdict = check(org, request(gpus=16, workload_id=existing.pk), is_update=True)
    assert verdict.deny and verdict.deny[0][0] == "POLICY_DENIED"
    previous = {"pods": [{"count": 1, "gpus": 8, "flavors": ["a100-80g"]}]}
    verdict = check(org, request(previous=previous), is_update=True)
    assert verdict.deny, "a new flavor is growth too"


BROKEN = {"name": "h100-share", "kind": "validate", "mode": "enforce",
          "rule": 'fleet.utilisation["b200"] < 0.5'}


def test_evaluation_error_denies_by_default_and_is_recorded(org):
    policy_create(user=org.admin, data=BROKEN)
    verdict = check(org, request())
    assert len(verdict.deny) == 1
    code, message = verdict.deny[0]
    assert code == "POLICY_ERROR"
    assert "policy h100-share could not be evaluated (rule: fleet.utilisation[\"b200\"] < 0.5)" \
        in message and "no such key" in message
    violation = PolicyViolation.objects.get()
    assert (violation.outcome, violation.code) == ("error", "POLICY_ERROR")
    assert violation.expression == BROKEN["rule"]
    assert violation.input["fleet"]["utilisation"] == {"a100-80g": 0.0, "h100-80g": 0.0}


@override_settings(ALLOT_POLICY_FAIL_OPEN=True)
def test_evaluation_error_fails_open_when_set(org):
    policy_create(user=org.admin, data=BROKEN)
    verdict = check(org, request())
    assert verdict.deny == []
    assert "could not be evaluated" in verdict.audit[0]
    assert PolicyViolation.objects.get().outcome == "error"


SERVING = {"name": "serving-high", "kind": "priority", "mode": "enforce",
           "match": '"role" in request.labels && request.labels["role"] == "serving"',
           "rule": '"inference-high"'}


def test_priority_assigned(org):
    policy_create(user=org.admin, data=SERVING)
    verdict = check(org, request(flavors=["a100-80g"], labels={"role": "serving"}))
    assert verdict.priority_class == "inference-high" and verdict.deny == []
    assert check(org, request(flavors=["a100-80g"], labels={"role": "research"})) \
        .priority_class is None


def test_priority_naming_an_unknown_class_is_a_policy_error(org):
    policy_create(user=org.admin, data={**SERVING, "rule": '"platinum"'})
    verdict = check(org, request(flavors=["a100-80g"], labels={"role": "serving"}))
    assert verdict.priority_class is None
    assert verdict.deny[0][0] == "POLICY_ERROR"
    assert "unknown priority class 'platinum'" in verdict.deny[0][1]


def test_context_has_queue_fleet_and_cost_center(org):
    org.admit(org.team_a, 16)
    policy_create(user=org.admin, data={
        "name": "ctx", "kind": "validate", "mode": "audit",
        "rule": "false",
        "message": 'string(queue.used["a100-80g/gpu"]) + "/" + string(queue.max["a100-80g/gpu"])'
                   ' + " " + pct(fleet.utilisation["a100-80g"]) + " of " '
                   '+ string(fleet.capacity["a100-80g"]) + " cc=" + cost_center.name'
                   ' + " " + join(fleet.regions, ",")'})
    verdict = check(org, request(flavors=["a100-80g"]))
    assert verdict.audit == ["policy ctx (audit): audited: 16/40 25% of 64 cc= east,north"]


# --- end to end through the workers' submission service, when it is there -------------------

def submit_service():
    """The workers' submission service."""
    return pytest.importorskip("scheduling.services")

def test_denied_submission_is_recorded_rejected_with_the_message(org):
    services = submit_service()
    policy_create(user=org.admin, data=H100)
    workload = services.workload_submit(user=org.alice, data=request(), nudge=False)
    assert workload.state == "rejected"
    reason = workload.events.filter(type="reason").get()
    assert reason.code == "POLICY_DENIED"
    assert reason.message == ("H100s need the h100 approval: team team-a asked for 8 GPUs "
                              "(policy h100-approved)")


def test_priority_policy_sets_the_stored_class(org):
    services = submit_service()
    policy_create(user=org.admin, data=SERVING)
    workload = services.workload_submit(
        user=org.alice, data=request(flavors=["a100-80g"], labels={"role": "serving"}),
        nudge=False)
    assert workload.state == "pending"
    assert workload.priority_class.name == "inference-high"


def test_query_budget_reads_only_what_the_rules_need(torg, settings):
    """Committed policies and context: a warm check is the change-log query, nothing else
    (hit counts are buffered and written once for many submissions)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from policies.services import policy_counts_flush

    org = torg
    settings.ALLOT_POLICY_COUNTS_FLUSH_S = 3600
    policy_create(user=org.admin, data={"name": "cap", "kind": "validate", "mode": "enforce",
                                        "rule": "request.gpus <= 64"})
    check(org, request())  # loads the policies into the process cache
    with CaptureQueriesContext(connection) as queries:
        assert check(org, request()).deny == []
    assert len(queries) == 1, [q["sql"] for q in queries]  # the change log; nothing else
    policy_create(user=org.admin, data=H100)
    check(org, request())
    with CaptureQueriesContext(connection) as queries:
        check(org, request())
    # the change log, then the violation insert (team approvals and department are cached)
    statements = [q["sql"] for q in queries if q["sql"].split()[0] not in (
        "BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")]
    assert len(statements) == 2, statements
    assert "policies_change" in statements[0] and "INSERT" in statements[1]
    assert policy_counts_flush() == 2  # one UPDATE for both policies, four submissions
    assert sorted(Policy.objects.values_list("name", "hits", "denials")) == [
        ("cap", 4, 0), ("h100-approved", 2, 2)]


def test_researcher_reads_the_denial_through_the_api(org, user_api):
    submit_service()
    policy_create(user=org.admin, data=H100)
    response = user_api.post("/api/v1/workloads", request(), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "rejected"
    assert [(r["code"], r["message"]) for r in body["reasons"]] == [(
        "POLICY_DENIED",
        "H100s need the h100 approval: team team-a asked for 8 GPUs (policy h100-approved)")]
