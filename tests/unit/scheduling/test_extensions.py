"""The extension hooks (scheduling/extensions.py; no database)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling import extensions

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    """Other apps register their own hooks at start-up; these tests see only theirs."""
    monkeypatch.setattr(extensions, "_submission_checks", [])
    monkeypatch.setattr(extensions, "_cycle_adjusters", [])


def test_lower_max_only_lowers_and_names_the_policy():
    ctx = extensions.CycleContext(now=NOW, queue_paths=["rd"], clusters=["bj"], pending=[])
    ctx.quota_max[("rd", "a100-80g/gpu")] = 32.0
    ctx.lower_max("rd", "a100-80g/gpu", 40.0, policy="too-high")
    assert ctx.quota_max[("rd", "a100-80g/gpu")] == 32.0 and not ctx.max_policy
    ctx.lower_max("rd", "a100-80g/gpu", 16.0, policy="night-cap")
    assert ctx.quota_max[("rd", "a100-80g/gpu")] == 16.0
    assert ctx.max_policy[("rd", "a100-80g/gpu")] == "night-cap"
    ctx.lower_max("rd", "v100-32g/gpu", 4.0, policy="unlimited-before")
    assert ctx.quota_max[("rd", "v100-32g/gpu")] == 4.0


def test_restrict_clusters_intersects():
    ctx = extensions.CycleContext(now=NOW, queue_paths=[], clusters=["bj", "sh", "sg"],
                                  pending=[])
    ctx.restrict_clusters(7, ["bj", "sh"], reason="region cn")
    ctx.restrict_clusters(7, {"sh", "sg"})
    assert ctx.allowed_clusters[7] == {"sh"} and ctx.cluster_reasons[7] == "region cn"


def test_submission_checks_merge_denials_audit_and_last_priority():
    calls = []

    def a(ctx):
        calls.append("a")
        return extensions.SubmissionVerdict(deny=[("POLICY_DENIED", "a says no")],
                                            priority_class="batch-low", audit=["a ran"])

    def b(ctx):
        calls.append("b")
        return

    def c(ctx):
        calls.append("c")
        return extensions.SubmissionVerdict(priority_class="training", audit=["c ran"])

    for fn in (a, b, c, a):
        extensions.register_submission_check(fn)
    try:
        verdict = extensions.run_submission_checks(extensions.SubmissionContext(
            user=None, queue=None, team=None, request={}))
    finally:
        for fn in (a, b, c):
            extensions.unregister_submission_check(fn)
    assert calls == ["a", "b", "c"]  # registering twice keeps one
    assert verdict.deny == [("POLICY_DENIED", "a says no")]
    assert verdict.priority_class == "training" and verdict.audit == ["a ran", "c ran"]


def test_a_failing_adjuster_fails_the_cycle():
    def broken(ctx):
        raise ValueError("policy bug")

    extensions.register_cycle_adjuster(broken)
    try:
        with pytest.raises(ValueError, match="policy bug"):
            extensions.run_cycle_adjusters(extensions.CycleContext(
                now=NOW, queue_paths=[], clusters=[], pending=[]))
    finally:
        extensions.unregister_cycle_adjuster(broken)
