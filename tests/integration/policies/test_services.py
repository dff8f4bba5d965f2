"""Saving policies: invalid CEL refused with its position, versions with diffs, sync and
export round trip, hit and denial counters."""

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from policies.models import Policy, PolicyVersion
from policies.services import policy_create, policy_update

from .test_active import RULE

EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"
CAP = {"name": "gpu-cap", "kind": "validate", "mode": "audit", "rule": "request.gpus <= 16",
       "message": '"asked for " + string(request.gpus) + " GPUs, at most 16"'}


def test_invalid_cel_is_refused_with_the_position_and_nothing_saved(org):
    with pytest.raises(ValidationError) as info:
        policy_create(user=org.admin, data={**CAP, "rule": "request.gpus <= ",
                                            "match": "reqest.pods > 1"})
    errors = info.value.message_dict
    assert errors["rule"][0].startswith("line 1, column 16: Syntax error")
    assert errors["match"] == ["line 1, column 1: unknown variable 'reqest' (one of: request, "
                               "queue, team, cost_center, fleet, now)"]
    assert not Policy.objects.exists() and not PolicyVersion.objects.exists()


def test_unknown_scope_queue_is_refused(org):
    with pytest.raises(ValidationError) as info:
        policy_create(user=org.admin, data={**CAP, "scope": ["rd/nowhere"]})
    assert info.value.message_dict["scope"] == ["unknown queue 'rd/nowhere'"]


def test_every_change_is_a_version_with_author_and_diff(org):
    policy = policy_create(user=org.admin, data=CAP)
    policy = policy_update(user=org.admin, policy=policy,
                           data={"rule": "request.gpus <= 32", "mode": "enforce"},
                           comment="raise to 32")
    assert policy.version == 2
    v2, v1 = PolicyVersion.objects.filter(policy=policy).order_by("-version")
    assert (v2.author, v2.comment, v1.version) == (org.admin, "raise to 32", 1)
    assert "-mode: audit\n+mode: enforce" in v2.diff
    assert "-rule: request.gpus <= 16\n+rule: request.gpus <= 32" in v2.diff
    assert v2.content["rule"] == "request.gpus <= 32"
    same = policy_update(user=org.admin, policy=policy, data={"rule": "request.gpus <= 32"})
    assert same.version == 2, "no change, no version"


def test_invalid_update_keeps_the_old_version(org):
    policy = policy_create(user=org.admin, data=CAP)
    with pytest.raises(ValidationError):
        policy_update(user=org.admin, policy=policy, data={"rule": "request.gpus <="})
    policy.refresh_from_db()
    assert (policy.rule, policy.version) == ("request.gpus <= 16", 1)


def test_sync_export_round_trip(db, tmp_path, capsys):
    call_command("seed_demo")
    capsys.readouterr()
    call_command("policies_sync", str(EXAMPLES), "--user", "admin")
    assert "5 created, 0 updated, 0 unchanged, 0 turned off" in capsys.readouterr().out
    call_command("policies_sync", str(EXAMPLES))
    assert "0 created, 0 updated, 5 unchanged" in capsys.readouterr().out
    burst = Policy.objects.get(name="vision-a100-burst")
    assert (burst.kind, burst.key, burst.scope, burst.mode) == (
        "limit", "a100-80g/gpu", ["research/vision"], "audit")
    assert burst.versions.get().author.username == "admin"
    call_command("policies_export", str(tmp_path / "out"))
    exported = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert exported == sorted(p.name for p in EXAMPLES.iterdir())
    text = (tmp_path / "out" / "h100-approved-projects.yaml").read_text()
    (tmp_path / "out" / "h100-approved-projects.yaml").write_text(
        text.replace("mode: audit", "mode: enforce"))
    call_command("policies_sync", str(tmp_path / "out"), "--comment", "enforce after canary")
    assert "updated: h100-approved-projects" in capsys.readouterr().out
    h100 = Policy.objects.get(name="h100-approved-projects")
    assert (h100.mode, h100.version, h100.versions.first().comment) == (
        "enforce", 2, "enforce after canary")


def test_sync_is_all_or_nothing(org, tmp_path):
    (tmp_path / "a.yaml").write_text("name: good\nkind: validate\nrule: 'true'\n")
    (tmp_path / "b.yaml").write_text("name: bad\nkind: validate\nrule: 'request.gpus <'\n")
    with pytest.raises(CommandError) as info:
        call_command("policies_sync", str(tmp_path))
    assert "bad: rule: line 1, column 15" in str(info.value)
    assert not Policy.objects.exists()


def test_sync_prune_turns_off_policies_not_in_the_files(org, tmp_path):
    policy_create(user=org.admin, data={**CAP, "mode": "enforce"})
    (tmp_path / "a.yaml").write_text("name: good\nkind: validate\nrule: 'true'\n")
    call_command("policies_sync", str(tmp_path), "--prune")
    assert Policy.objects.get(name="gpu-cap").mode == "off"


def test_counters_outside_a_transaction_count_hits_and_denials(transactional_db):
    from policies.models import Policy
    from policies.services import policy_counters_bump, policy_create

    a = policy_create(user=None, data=RULE)
    b = policy_create(user=None, data={**RULE, "name": "other"})
    policy_counters_bump(hit_ids=[a.pk, b.pk], denied_ids=[b.pk])
    policy_counters_bump(hit_ids=[b.pk], denied_ids=[])
    assert list(Policy.objects.order_by("name").values_list("name", "hits", "denials")) == [
        ("cap", 1, 0), ("other", 2, 1)]
