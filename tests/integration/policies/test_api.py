"""/api/v1/policies and friends: CRUD with versions, CEL errors as 400s, try, replay,
violations and approvals, the policy files' test cases, permissions, and the OpenAPI schema."""

import json
from datetime import timedelta
from datetime import timezone as dt_timezone
from pathlib import Path

import yaml
from django.urls import reverse
from django.utils import timezone

from policies.models import Policy, PolicyViolation
from policies.services import policy_create

from .conftest import NOW

H100 = {"name": "h100-approved", "kind": "validate", "mode": "audit",
        "match": 'request.flavors.exists(f, f.startsWith("h100"))',
        "rule": '"h100" in team.approvals',
        "message": '"team " + team.name + " lacks the h100 approval"'}


def test_create_read_update_with_versions(admin_api):
    created = admin_api.post("/api/v1/policies", H100, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["name"], body["mode"], body["version"], body["updated_by"]) == (
        "h100-approved", "audit", 1, "root")
    changed = admin_api.patch("/api/v1/policies/h100-approved",
                              {"mode": "enforce", "comment": "canary went fine"}, format="json")
    assert changed.status_code == 200 and changed.json()["version"] == 2
    versions = admin_api.get("/api/v1/policies/h100-approved/versions").json()
    assert [(v["version"], v["author"], v["comment"]) for v in versions] == [
        (2, "root", "canary went fine"), (1, "root", "created")]
    assert "+mode: enforce" in versions[0]["diff"]
    listed = admin_api.get("/api/v1/policies").json()
    assert [(p["name"], p["mode"], p["hits"], p["denials"]) for p in listed] == [
        ("h100-approved", "enforce", 0, 0)]


def test_invalid_cel_is_a_400_with_the_position(admin_api):
    rule = '"h100" in team.approvals &&'
    response = admin_api.post("/api/v1/policies", {**H100, "rule": rule}, format="json")
    assert response.status_code == 400
    assert response.json()["rule"][0].startswith("line 1, column 28: Syntax error")
    assert not Policy.objects.exists()


def test_validate_endpoint(admin_api):
    response = admin_api.post("/api/v1/policies/validate",
                              {"policy": {**H100, "kind": "limit"}}, format="json")
    assert response.json()["valid"] is False
    assert "needs the quota key" in response.json()["errors"]["key"][0]
    ok = admin_api.post("/api/v1/policies/validate", {"policy": H100}, format="json").json()
    assert ok == {"valid": True, "errors": {}}


def test_try_with_unsaved_changes(admin_api, org):
    policy_create(user=org.admin, data=H100)
    sample = {"request": {"flavors": ["h100-80g"], "gpus": 8}, "team": {"name": "nlp"}}
    result = admin_api.post("/api/v1/policies/h100-approved/try", {"input": sample},
                            format="json").json()
    assert result == {"matched": True, "value": False, "decision": "deny",
                      "message": "team nlp lacks the h100 approval", "error": ""}
    loosened = admin_api.post("/api/v1/policies/h100-approved/try",
                              {"input": sample, "policy": {"rule": "request.gpus <= 8"}},
                              format="json").json()
    assert loosened["decision"] == "allow"


def test_replay_endpoint(admin_api, org):
    policy_create(user=org.admin, data=H100)
    org.pending(org.team_a, 8, name="long-ago", flavors=["h100-80g"],
                at=timezone.now() - timedelta(days=8))
    org.pending(org.team_a, 8, name="recent", flavors=["h100-80g"],
                at=timezone.now() - timedelta(hours=1))
    report = admin_api.post("/api/v1/policies/h100-approved/replay", {}, format="json").json()
    assert (report["replayed"], report["denied"]) == (1, 1)
    assert [(h["name"], h["message"]) for h in report["hits"]] == [
        ("recent", "team team-a lacks the h100 approval")]


def test_violations_list_is_for_admins_and_filters(admin_api, user_api, org):
    policy = policy_create(user=org.admin, data=H100)
    PolicyViolation.objects.create(policy=policy, policy_version=1, mode="audit",
                                   outcome="audited", at=NOW, subject="x",
                                   queue_path="rd/team-a", message="m")
    PolicyViolation.objects.create(policy=policy, policy_version=1, mode="audit",
                                   outcome="error", at=NOW, subject="y",
                                   queue_path="rd/team-b", message="e")
    assert user_api.get("/api/v1/policy-violations").status_code == 403
    body = admin_api.get("/api/v1/policy-violations?outcome=audited").json()
    assert [v["subject"] for v in body["results"]] == ["x"]
    body = admin_api.get("/api/v1/policy-violations?queue=rd/team-b").json()
    assert [v["subject"] for v in body["results"]] == ["y"]
    # `since` in any offset Python reads; PostgreSQL takes none beyond 15:59 (a 500 before).
    since = (NOW - timedelta(hours=1)).astimezone(dt_timezone(timedelta(hours=16, minutes=41)))
    r = admin_api.get("/api/v1/policy-violations", {"since": since.isoformat()})
    assert r.status_code == 200 and len(r.json()["results"]) == 2
    r = admin_api.get("/api/v1/policy-violations", {"since": (NOW + timedelta(hours=1)).astimezone(
        dt_timezone(timedelta(hours=-16, minutes=-41))).isoformat()})
    assert r.status_code == 200 and r.json()["results"] == []
    r = admin_api.get("/api/v1/policy-violations", {"since": "0001-01-01T01:00:00+16:41"})
    assert r.status_code == 400 and "out of range in UTC" in json.dumps(r.json())


def test_researchers_read_but_cannot_write(user_api, org):
    policy_create(user=org.admin, data=H100)
    assert user_api.get("/api/v1/policies/h100-approved").json()["rule"] == H100["rule"]
    assert user_api.patch("/api/v1/policies/h100-approved", {"mode": "off"},
                          format="json").status_code == 403
    assert user_api.post("/api/v1/policies", {**H100, "name": "x"},
                         format="json").status_code == 403
    assert user_api.get("/api/v1/policies/nope").status_code == 404


def test_approvals_grant_and_revoke(admin_api, org):
    granted = admin_api.post("/api/v1/policy-approvals",
                             {"team": "team-a", "name": "h100", "note": "project X"},
                             format="json")
    assert granted.status_code == 201 and granted.json()["granted_by"] == "root"
    assert admin_api.post("/api/v1/policy-approvals", {"team": "zzz", "name": "h100"},
                          format="json").json() == {"team": ["no team named 'zzz'"]}
    assert admin_api.delete("/api/v1/policy-approvals/team-a/h100").status_code == 204
    assert admin_api.get("/api/v1/policy-approvals").json() == []


def test_delete(admin_api, org):
    policy_create(user=org.admin, data=H100)
    assert admin_api.delete("/api/v1/policies/h100-approved").status_code == 204
    assert not Policy.objects.exists()


def test_policies_are_in_the_openapi_schema(admin_api):
    schema = admin_api.get(reverse("api-schema"), {"format": "json"}).json()
    paths = schema["paths"]
    for path in ("/api/v1/policies", "/api/v1/policies/{name}",
                 "/api/v1/policies/{name}/versions", "/api/v1/policies/{name}/try",
                 "/api/v1/policies/{name}/replay", "/api/v1/policy-violations",
                 "/api/v1/policy-tests",
                 "/api/v1/policy-approvals"):
        assert path in paths, path
    assert set(paths["/api/v1/policies"]) >= {"get", "post"}


def test_order_is_bounded(admin_api):
    for order, message in ((2**31, "Ensure this value is less than or equal to 1000000."),
                           (-(2**31) - 1, "Ensure this value is greater than or equal to "
                                          "-1000000.")):
        response = admin_api.post("/api/v1/policies", {**H100, "order": order}, format="json")
        assert response.status_code == 400
        assert response.json() == {"order": [message]}
    assert not Policy.objects.exists()
    checked = admin_api.post("/api/v1/policies/validate",
                             {"policy": {**H100, "order": 10**12}}, format="json").json()
    assert checked == {"valid": False, "errors": {
        "order": ["order 1000000000000 is out of range: from -1000000 to 1000000"]}}
    created = admin_api.post("/api/v1/policies", {**H100, "order": -1_000_000}, format="json")
    assert created.status_code == 201 and created.json()["order"] == -1_000_000


# --- POST /api/v1/policy-tests: a policy repository's test cases, run by the server as
# `manage.py policies_test` runs them (what `allot policies test DIR` sends); nothing saved.

ONES = "[" + ", ".join(["1"] * 400) + "]"  # as test_checks.py: a costly comprehension's list
EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"


def files(*docs):
    return {"files": [{"path": f"p{i}.yaml", "document": d} for i, d in enumerate(docs)]}


def test_the_examples_pass_as_with_the_command(admin_api):
    body = {"files": [{"path": p.name, "document": yaml.safe_load(p.read_text())}
                      for p in sorted(EXAMPLES.glob("*.yaml"))]}
    response = admin_api.post("/api/v1/policy-tests", body, format="json")
    assert response.status_code == 200, response.json()
    report = response.json()
    assert (report["passed"], report["failed"], report["policies"], report["files"]) == (
        14, 0, 5, 5)
    first = report["results"][0]
    assert first == {"file": "h100-approved-projects.yaml", "policy": "h100-approved-projects",
                     "case": "an approved team may use H100s", "passed": True,
                     "detail": "allow"}
    assert not Policy.objects.exists()


def test_failures_are_reported_case_by_case(admin_api):
    doc = {"policies": [
        {"name": "at-most-8", "kind": "validate", "rule": "request.gpus <= 8",
         "tests": [{"name": "big", "input": {"request": {"gpus": 16}}, "expect": "allow"}]},
        {"name": "broken", "kind": "limit", "rule": "16"},
        # Passes the syntax checks but costs too much: refused as a save would refuse it,
        # before any case runs in the web process.
        {"name": "costly", "kind": "validate",
         "rule": f"{ONES}.map(a, {ONES}.map(b, a + b)).size() > 0",
         "tests": [{"name": "never run", "expect": "allow"}]},
    ]}
    report = admin_api.post("/api/v1/policy-tests", files(doc), format="json").json()
    assert (report["passed"], report["failed"]) == (0, 3)
    by_case = {(r["policy"], r["case"]): r["detail"] for r in report["results"]}
    assert by_case[("at-most-8", "big")] == (
        "expected allow, got deny: policy at-most-8: rule request.gpus <= 8 is false")
    assert by_case[("broken", "(definition)")].startswith(
        "key: a limit policy needs the quota key it caps")
    assert "took longer than" in by_case[("costly", "(definition)")]


def test_a_file_that_is_no_policy_file_is_a_400(admin_api):
    response = admin_api.post("/api/v1/policy-tests",
                              files({"name": "x", "kind": "validate", "rule": "true",
                                     "colour": "red"}, ["a list"]), format="json")
    assert response.status_code == 400
    assert response.json() == {"files": [
        "p0.yaml: x: unknown field(s) colour",
        "p1.yaml: expected a policy mapping or 'policies: [...]'"]}
    assert admin_api.post("/api/v1/policy-tests", {"files": []},
                          format="json").status_code == 400


def test_admins_only(user_api):
    response = user_api.post("/api/v1/policy-tests", files({"name": "x", "kind": "validate",
                                                             "rule": "true"}), format="json")
    assert response.status_code == 403
    assert response.json() == {"detail": "Only platform admins may run policy tests."}
