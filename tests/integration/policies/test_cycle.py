"""Limit and placement policies in the scheduling cycle (the adjuster), and end to end through
the workers' snapshot and the engine when they are there."""

import pytest

from policies import cycle as policies_cycle
from policies.models import PolicyViolation
from policies.services import policy_create, policy_update
from scheduling.extensions import CycleContext, PendingInfo

from .conftest import NOW

BURST = {
    "name": "team-a-a100-burst", "kind": "limit", "mode": "enforce", "key": "a100-80g/gpu",
    "match": 'queue.path == "rd/team-a"',
    "rule": 'fleet.utilisation["a100-80g"] < 0.4 ? 32 : 16',
    "message": '"rd/team-a may use " + fmt(fleet.utilisation["a100-80g"] < 0.4 ? 32 : 16) + '
               '" A100s while the fleet is " + pct(fleet.utilisation["a100-80g"]) + " busy"',
}
EAST = {
    "name": "labelling-east-only", "kind": "placement", "mode": "enforce",
    "match": '"kind" in request.labels && request.labels["kind"] == "data-labelling"',
    "rule": '["east"]',
    "message": '"data-labelling work runs only in the east region"',
}


@pytest.fixture(autouse=True)
def _fresh_dedupe():
    policies_cycle._recent.clear()
    yield
    policies_cycle._recent.clear()


def context(org, pending=()):
    ctx = CycleContext(now=NOW, queue_paths=["rd", "rd/team-a", "rd/team-b", "rd/vision"],
                       clusters=["bj-1", "sh-1"], pending=list(pending))
    ctx.quota_max.update({("rd", "a100-80g/gpu"): 64.0, ("rd/team-a", "a100-80g/gpu"): 40.0,
                          ("rd/team-b", "a100-80g/gpu"): 64.0, ("rd/vision", "a100-80g/gpu"): 64.0})
    return ctx


def info(workload, labels=None):
    return PendingInfo(id=workload.pk, name=workload.name, queue_path=workload.queue.path,
                       team=workload.team.name, owner="alice", priority_class="training",
                       labels=labels or workload.labels, dataset="", gpus=8,
                       flavors=("a100-80g",))


def test_limit_follows_fleet_utilisation_across_the_threshold(org):
    policy_create(user=org.admin, data=BURST)
    org.admit(org.team_b, 24)  # 24 / 64 = 37.5% busy
    ctx = context(org)
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.quota_max[("rd/team-a", "a100-80g/gpu")] == 32
    assert ctx.max_policy[("rd/team-a", "a100-80g/gpu")] == "team-a-a100-burst"
    assert ctx.quota_max[("rd/team-b", "a100-80g/gpu")] == 64.0
    org.admit(org.team_b, 8, name="more")  # 32 / 64 = 50%
    ctx = context(org)
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.quota_max[("rd/team-a", "a100-80g/gpu")] == 16
    capped = PolicyViolation.objects.filter(outcome="capped").order_by("id")
    assert [v.message for v in capped] == [
        "rd/team-a may use 32 A100s while the fleet is 38% busy",
        "rd/team-a may use 16 A100s while the fleet is 50% busy",
    ]
    assert capped[1].input["queue"]["max"]["a100-80g/gpu"] == 40


def test_cycle_findings_are_recorded_once_while_unchanged(org):
    policy_create(user=org.admin, data=BURST)
    for _ in range(3):
        policies_cycle.policy_cycle_adjuster(context(org))
    assert PolicyViolation.objects.filter(outcome="capped").count() == 1


def test_a_forecast_caps_the_same_and_records_nothing(org):
    # The start forecast reads the cycle's view (record False): the same caps, no violation
    # rows (the cycle records them).
    policy_create(user=org.admin, data=BURST)
    org.admit(org.team_b, 24)
    ctx = context(org)
    ctx.record = False
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.quota_max[("rd/team-a", "a100-80g/gpu")] == 32
    assert not PolicyViolation.objects.exists()


def test_limit_in_audit_mode_records_but_does_not_cap(org):
    policy_create(user=org.admin, data={**BURST, "mode": "audit"})
    org.admit(org.team_b, 40)
    ctx = context(org)
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.quota_max[("rd/team-a", "a100-80g/gpu")] == 40.0
    assert ("rd/team-a", "a100-80g/gpu") not in ctx.max_policy
    violation = PolicyViolation.objects.get()
    assert (violation.outcome, violation.message) == (
        "audited", "rd/team-a may use 16 A100s while the fleet is 62% busy")


def test_limit_error_fails_closed_at_zero(org):
    rule = 'fleet.utilisation["b200"] < 0.4 ? 32 : 16'
    policy_create(user=org.admin, data={**BURST, "rule": rule})
    ctx = context(org)
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.quota_max[("rd/team-a", "a100-80g/gpu")] == 0
    violation = PolicyViolation.objects.get()
    assert (violation.outcome, violation.code, violation.queue_path) == (
        "error", "POLICY_ERROR", "rd/team-a")


def test_placement_keeps_labelling_work_in_the_east(org):
    policy_create(user=org.admin, data=EAST)
    labelling = org.pending(org.vision, 8, name="tag-images", labels={"kind": "data-labelling"})
    training = org.pending(org.vision, 8, name="train", labels={"kind": "training"})
    ctx = context(org, [info(labelling), info(training)])
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.allowed_clusters == {labelling.pk: {"sh-1"}}
    assert ctx.cluster_reasons[labelling.pk] == "data-labelling work runs only in the east region"


def test_placement_off_does_nothing(org):
    policy = policy_create(user=org.admin, data=EAST)
    policy_update(user=org.admin, policy=policy, data={"mode": "off"})
    labelling = org.pending(org.vision, 8, name="tag-images", labels={"kind": "data-labelling"})
    ctx = context(org, [info(labelling)])
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.allowed_clusters == {}


# --- end to end: the workers' snapshot and the engine -----------------------------------------

def engine_cycle():
    """The workers' snapshot builder and the engine's cycle."""
    cycle = pytest.importorskip("scheduling.workers.snapshot")
    from scheduling import engine

    return cycle, engine


def test_engine_admits_up_to_the_policy_cap_and_evicts_nothing(org):
    cycle, engine = engine_cycle()
    policy_create(user=org.admin, data=BURST)
    running = org.admit(org.team_a, 24, name="big")  # 24 / 64 = 37.5%: cap 32
    small = org.pending(org.team_a, 8, name="small")
    snapshot, _ = cycle.build_snapshot(NOW)
    result = engine.schedule(snapshot)
    assert [a.workload for a in result.admitted] == [str(small.pk)]
    # Busier fleet: the cap drops to 16 below team-a's 24 in use: nothing is evicted,
    # nothing new admitted, and the reason names the policy.
    org.admit(org.team_b, 16, name="other")
    late = org.pending(org.team_a, 8, name="late")
    snapshot, _ = cycle.build_snapshot(NOW)
    result = engine.schedule(snapshot)
    assert result.preempted == []
    assert str(late.pk) not in [a.workload for a in result.admitted]
    reason = result.reasons[str(late.pk)]
    assert reason.code == "QUOTA_MAX" and "team-a-a100-burst" in reason.message
    assert running.admissions.get().ended_at is None


def test_engine_places_labelling_work_in_the_east(org):
    cycle, engine = engine_cycle()
    policy_create(user=org.admin, data=EAST)
    labelling = org.pending(org.vision, 8, name="tag-images", labels={"kind": "data-labelling"})
    snapshot, _ = cycle.build_snapshot(NOW)
    result = engine.schedule(snapshot)
    assert [(a.workload, a.cluster) for a in result.admitted] == [(str(labelling.pk), "sh-1")]


def test_limit_on_a_key_no_queue_sets_is_reported(org):
    policy_create(user=org.admin, data={**BURST, "key": "h100-80g/gpu"})
    ctx = context(org)
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ("rd/team-a", "h100-80g/gpu") not in ctx.quota_max
    violation = PolicyViolation.objects.get()
    assert violation.outcome == "error"
    assert "caps h100-80g/gpu, which no queue of the tree sets" in violation.message


def test_placement_reads_fields_pending_info_does_not_carry(org):
    policy_create(user=org.admin, data={
        "name": "gangs-east", "kind": "placement", "mode": "enforce",
        "rule": 'request.pods > 1 && request.preemptible ? ["east"] : ["north"]'})
    gang = org.pending(org.vision, 8, name="gang")
    gang.pod_sets.update(count=4)
    single = org.pending(org.vision, 8, name="single")
    ctx = context(org, [info(gang), info(single)])
    policies_cycle.policy_cycle_adjuster(ctx)
    assert ctx.allowed_clusters == {gang.pk: {"sh-1"}, single.pk: {"bj-1"}}
