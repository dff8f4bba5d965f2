"""The five example policies on the demo organisation: synced in audit mode, then enforced,
each doing what it says (the over-budget one needs billing: see test_cost_center.py)."""

import itertools
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from policies.models import Policy, PolicyViolation
from policies.services import policy_update, team_approval_grant
from quotas.models import Queue, Team

EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"


@pytest.fixture
def demo(db):
    call_command("seed_demo", stdout=StringIO())
    call_command("policies_sync", str(EXAMPLES), stdout=StringIO())
    return get_user_model().objects.get(username="admin")


def enforce(admin, name):
    policy_update(user=admin, policy=Policy.objects.get(name=name), data={"mode": "enforce"},
                  comment="canary done")


_names = itertools.count()


def submit(**data):
    services = pytest.importorskip("scheduling.services")
    alice = get_user_model().objects.get(username="alice")
    # names are unique among a queue's open workloads
    request = {"name": f"w{next(_names)}", "queue": "research/vision/detection",
               "priority_class": "training",
               "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 8}], **data}
    return services.workload_submit(user=alice, data=request, nudge=False)


def test_h100_rule_audits_then_denies_then_allows_approved(demo):
    h100 = {"pods": [{"count": 1, "flavors": ["h100-80g"], "gpus": 8}]}
    assert submit(**h100).state == "pending"
    assert PolicyViolation.objects.get().outcome == "audited"
    enforce(demo, "h100-approved-projects")
    denied = submit(**h100)
    assert denied.state == "rejected"
    assert denied.events.get(type="reason").message == (
        "H100s need the h100 approval: team vision asked for 8 GPUs on h100-80g and holds no "
        "approvals (policy h100-approved-projects)")
    team_approval_grant(user=demo, team=Team.objects.get(name="vision"), name="h100")
    assert submit(**h100).state == "pending"


def test_serving_gets_inference_high_once_enforced(demo):
    assert submit(labels={"role": "serving"}).priority_class.name == "training"
    enforce(demo, "serving-inference-high")
    assert submit(labels={"role": "serving"}).priority_class.name == "inference-high"


def test_cycle_policies_on_the_demo_fleet(demo):
    cycle = pytest.importorskip("scheduling.workers.snapshot")
    from django.utils import timezone

    labelled = submit(labels={"kind": "data-labelling"})
    _, parts = cycle.build_snapshot(timezone.now())
    assert parts.context.allowed_clusters == {}, "audit mode restricts nothing"
    assert ("research/vision", "a100-80g/gpu") not in parts.context.max_policy
    enforce(demo, "labelling-east-only")
    enforce(demo, "vision-a100-burst")
    _, parts = cycle.build_snapshot(timezone.now())
    assert parts.context.allowed_clusters == {labelled.pk: {"sh-onprem"}}
    assert parts.context.quota_max[("research/vision", "a100-80g/gpu")] == 32
    assert parts.context.max_policy[("research/vision", "a100-80g/gpu")] == "vision-a100-burst"
    assert Queue.objects.filter(path="research/vision").exists()
