"""What-if with a policy change (policies/whatif.py through scheduling/whatif): a validate
policy denies submissions of the changed replay, a priority policy sets classes, a limit
policy caps a queue; bad definitions name the field; only admins may try them."""

from __future__ import annotations

import pytest

from policies.models import Policy
from scheduling.models import WhatIf
from scheduling.whatif.services import what_if_run
from tests.integration.scheduling.whatif.test_whatif import api, busy  # noqa: F401

pytestmark = pytest.mark.django_db

SMALL_ONLY = {"name": "small-only", "kind": "validate", "rule": "request.gpus < 8",
              "message": "'at most 7 GPUs, asked ' + string(request.gpus)"}


def start(world, changes, hours=2):
    r = api(world.admin).post("/api/v1/what-if", {"hours": hours, "repeat_past": False,
                                                   "changes": changes}, format="json")
    return r


def test_a_validate_policy_denies_the_waiting_work_in_the_changed_replay(busy):  # noqa: F811
    r = start(busy, {"policies": [SMALL_ONLY]})
    assert r.status_code == 202, r.json()
    pk = r.json()["id"]
    effects = WhatIf.objects.get(pk=pk).changes["policy_effects"]
    # p1 and p2 (8 GPUs each, waiting) are denied; r1 and r2 run already: not submissions.
    assert effects["policies"] == ["small-only"]
    assert sorted(effects["deny"].values()) == ["at most 7 GPUs, asked 8"] * 2
    what_if_run(what_if_id=pk)
    body = api(busy.admin).get(f"/api/v1/what-if/{pk}").json()
    base, changed = body["result"]["baseline"], body["result"]["changed"]
    assert base["queues"]["rd/vision"]["admitted"] == 4
    assert changed["queues"]["rd/vision"]["admitted"] == 2
    doc = api(busy.admin).get(f"/api/v1/what-if/{pk}/scenario?variant=changed").json()
    assert len(doc["workloads"]) == 2
    # Nothing saved as a policy.
    assert not Policy.objects.exists()


def test_priority_and_limit_policies(busy):  # noqa: F811
    r = start(busy, {"policies": [
        {"name": "urgent", "kind": "priority", "rule": "'inference-high'",
         "match": "request.queue == 'rd/vision'"},
        {"name": "vision-cap", "kind": "limit", "key": "a100-80g/gpu", "rule": "16",
         "match": "queue.path == 'rd/vision'"}]})
    assert r.status_code == 202, r.json()
    run = WhatIf.objects.get(pk=r.json()["id"])
    effects = run.changes["policy_effects"]
    assert sorted(effects["priority"].values()) == ["inference-high"] * 2
    assert effects["caps"] == [{"queue": "rd/vision", "key": "a100-80g/gpu", "max": 16,
                                "policy": "vision-cap"}]
    doc = api(busy.admin).get(f"/api/v1/what-if/{run.pk}/scenario?variant=changed").json()
    vision = next(c for q in doc["queues"] for c in q.get("children", [])
                  if c["name"] == "vision")
    assert vision["quota"]["a100-80g"]["gpu"]["max"] == 16  # was 24
    classes = {w["name"]: w["priority_class"] for w in doc["workloads"]}
    assert sorted(classes.values()) == ["inference-high", "inference-high", "training",
                                        "training"]


def test_an_existing_policy_edited_by_name(busy):  # noqa: F811
    Policy.objects.create(name="small-only", kind="validate", rule="request.gpus < 64",
                          mode="audit")
    # Only the rule changes; the mode stays audit: reported, nothing denied.
    r = start(busy, {"policies": [{"name": "small-only", "rule": "request.gpus < 8"}]})
    assert r.status_code == 202, r.json()
    effects = WhatIf.objects.get().changes["policy_effects"]
    assert effects["deny"] == {} and effects["audited"][0].startswith("audit-mode")
    assert Policy.objects.get().rule == "request.gpus < 64"  # the stored one is unchanged


def test_bad_policy_changes_name_the_field_and_save_nothing(busy):  # noqa: F811
    r = start(busy, {"policies": [{**SMALL_ONLY, "rule": "request.gpus <"}]})
    assert r.status_code == 400 and "policies[0].rule" in r.json(), r.json()
    r = start(busy, {"policies": [{"name": "where", "kind": "placement", "rule": "['bj']"}]})
    assert r.status_code == 400 and "placement" in r.json()["policies[0].kind"][0]
    r = start(busy, {"policies": [{**SMALL_ONLY, "mode": "off"}]})
    assert r.status_code == 400 and "off" in r.json()["policies[0].mode"][0]
    r = start(busy, {"policies": {"name": "x"}})
    assert r.status_code == 400 and r.json()["policies"] == [
        "expected a list of policy definitions"]
    # A client's own effects are not taken.
    r = start(busy, {"policy_effects": {"deny": {"w1": "no"}}})
    assert r.status_code == 202 and "policy_effects" not in WhatIf.objects.get().changes
    WhatIf.objects.all().delete()
    lead = api(busy.bob)
    r = lead.post("/api/v1/what-if", {"hours": 2, "changes": {"policies": [SMALL_ONLY]}},
                  format="json")
    assert r.status_code == 403 and "only admins may try policies" in r.json()["detail"]
    assert not WhatIf.objects.exists()


def test_page_takes_a_policy_in_yaml(busy, client):  # noqa: F811
    client.force_login(busy.admin)
    assert 'id="what-if-policy"' in client.get("/what-if/").content.decode()
    r = client.post("/what-if/", {"hours": "2", "policy": "name: small-only\nkind: validate\n"
                                                          "rule: request.gpus < 8\n"})
    run = WhatIf.objects.get()
    assert r.status_code == 302 and run.changes["policies"][0]["name"] == "small-only"
    what_if_run(what_if_id=run.pk)
    page = client.get(f"/what-if/{run.pk}/").content.decode()
    assert 'id="what-if-policy-effects"' in page and "Submissions denied: 2" in page
    r = client.post("/what-if/", {"hours": "2", "policy": "name: [unclosed"})
    assert r.status_code == 400 and "policy: not YAML" in r.content.decode()
    r = client.post("/what-if/", {"hours": "2", "policy": "- a list"})
    assert r.status_code == 400 and "one policy definition" in r.content.decode()
    assert WhatIf.objects.count() == 1
