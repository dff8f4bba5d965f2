"""Reads for policies: lists, violations, the 7-day replay and the "try it" evaluation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from .celexpr import PolicyEvaluationError, make_context
from .checks import definition_errors
from .cost_center import cost_center_variables
from .evaluation import evaluate_limits, evaluate_placements, evaluate_request
from .models import Policy, PolicyVersion, PolicyViolation
from .rules import ENFORCE, LIMIT, PLACEMENT, PRIORITY, PolicySpec, run_match, run_message, run_rule
from .specs import CaseResult, PolicyFile, normalise, run_tests
from .variables import (
    admitted_usage_by_leaf,
    deep_merge,
    fleet_variables,
    now_variables,
    queue_variables_many,
    sample_variables,
    team_variables,
    workload_request_variables,
)


def policy_list() -> QuerySet[Policy]:
    """Policies with who changed them last (for the list page and the API).

    This process's buffered hit and denial counts are written first, so they show.
    """
    from .services import policy_counts_flush  # noqa: PLC0415

    policy_counts_flush()
    return Policy.objects.select_related("updated_by").order_by("order", "name")


def policy_versions(policy: Policy) -> QuerySet[PolicyVersion]:
    """A policy's versions, newest first."""
    return policy.versions.select_related("author").order_by("-version")


def violation_list(
    *, policy: Policy | None = None, outcome: str = "", since: datetime | None = None,
) -> QuerySet[PolicyViolation]:
    """Recorded violations, newest first, optionally for one policy or outcome."""
    qs = PolicyViolation.objects.select_related("policy", "user").order_by("-at", "-id")
    if policy is not None:
        qs = qs.filter(policy=policy)
    if outcome:
        qs = qs.filter(outcome=outcome)
    if since is not None:
        qs = qs.filter(at__gte=since)
    return qs


@dataclass
class ReplayHit:
    """One recorded submission the policy would have acted on."""

    workload_id: int
    name: str
    queue: str
    owner: str
    submitted_at: datetime
    outcome: str
    message: str


@dataclass
class ReplayReport:
    """What a policy would have done to the last days' submissions."""

    policy: str
    days: int
    replayed: int = 0
    matched: int = 0
    denied: int = 0
    errors: int = 0
    changed: int = 0
    hits: list[ReplayHit] = field(default_factory=list)
    note: str = ""


def policy_replay(spec: PolicySpec, *, days: int = 7, now: datetime | None = None,
                  limit_hits: int = 200) -> ReplayReport:
    """Replay the submissions recorded in the last `days` through `spec`, as if enforced.

    Each submission is evaluated with its own request and submit time (`now`), and today's
    queue, team, cost-center and fleet values (those are not recorded per submission).
    Limit policies have no submissions to replay: their effect on today's queues is reported.
    """
    from scheduling.models import Workload  # noqa: PLC0415

    now = now or timezone.now()
    report = ReplayReport(policy=spec.name, days=days)
    enforced = PolicySpec(**{**spec.__dict__, "mode": ENFORCE})
    usage = admitted_usage_by_leaf()
    fleet = fleet_variables(usage)
    if spec.kind == LIMIT:
        from quotas.models import Queue  # noqa: PLC0415

        queues = list(Queue.objects.all())
        qvars = queue_variables_many(queues, fleet=fleet, usage_by_leaf=usage)
        base = {**sample_variables(now), "fleet": fleet}
        out = evaluate_limits([enforced], qvars.values(), base)
        report.replayed = len(qvars)
        for finding, subject in zip(out.findings, out.subjects, strict=True):
            report.changed += finding.outcome == "capped"
            report.errors += finding.outcome == "error"
            report.hits.append(ReplayHit(0, subject, subject, "", now, finding.outcome,
                                         finding.message))
        report.note = "limit policies act on queues, not submissions: this is their effect now"
        return report
    workloads = (
        Workload.objects.filter(submitted_at__gte=now - timedelta(days=days))
        .select_related("queue", "team", "owner", "priority_class")
        .prefetch_related("pod_sets").order_by("-submitted_at")
    )
    queue_cache: dict[str, Any] = {}
    team_cache: dict[Any, tuple[dict, dict]] = {}
    for workload in workloads.iterator(chunk_size=500):
        report.replayed += 1
        path = workload.queue.path
        if not spec.applies_to_path(path):
            continue
        if path not in queue_cache:
            queue_cache[path] = queue_variables_many(
                [workload.queue], fleet=fleet, usage_by_leaf=usage)[path]
        if workload.team_id not in team_cache:
            team_cache[workload.team_id] = (
                team_variables(workload.team, now=now), cost_center_variables(workload.team))
        team_vars, cost_vars = team_cache[workload.team_id]
        variables = {
            "request": workload_request_variables(workload), "queue": queue_cache[path],
            "team": team_vars, "cost_center": cost_vars, "fleet": fleet,
            "now": now_variables(workload.submitted_at),
        }
        hit = _replay_one(enforced, variables, fleet, workload.pk, report)
        if hit is not None:
            if len(report.hits) < limit_hits:
                report.hits.append(ReplayHit(
                    workload.pk, workload.name, path, workload.owner.get_username(),
                    workload.submitted_at, hit[0], hit[1]))
    return report


def _replay_one(
    spec: PolicySpec, variables: Mapping[str, Any], fleet: Mapping[str, Any], workload_id: int,
    report: ReplayReport,
) -> tuple[str, str] | None:
    if spec.kind == PLACEMENT:
        out = evaluate_placements([spec], [(workload_id, variables["request"])], variables,
                                  fleet["clusters"])
        if out.findings:
            report.errors += 1
            return "error", out.findings[0].message
        if workload_id not in out.placements:
            return None
        report.matched += 1
        allowed, reason = out.placements[workload_id]
        if allowed != {c["name"] for c in fleet["clusters"]}:
            report.changed += 1
            return "placed", f"{reason} -> {', '.join(sorted(allowed)) or 'no cluster'}"
        return None
    outcome = evaluate_request([spec], variables)
    if outcome.matched:
        report.matched += 1
    for finding in outcome.findings:
        if finding.outcome == "error":
            report.errors += 1
            report.denied += 1
            return "error", finding.message
        if finding.outcome == "denied":
            report.denied += 1
            return "denied", finding.message
        if spec.kind == PRIORITY and finding.outcome == "prioritized":
            if finding.value != variables["request"]["priority_class"]:
                report.changed += 1
                return "prioritized", (f"{variables['request']['priority_class']} -> "
                                       f"{finding.value}")
    return None


@dataclass
class TryResult:
    """The outcome of one policy on one sample context, for the "try it" box."""

    matched: bool | None
    value: Any
    decision: str
    message: str
    error: str


def policy_try(spec: PolicySpec, sample: Mapping[str, Any], *, now: datetime | None = None
               ) -> TryResult:
    """Evaluate `spec` (as if enforced) on a sample context laid over neutral defaults."""
    variables = deep_merge(sample_variables(now), sample)
    enforced = PolicySpec(**{**spec.__dict__, "mode": ENFORCE, "scope": ()})
    ctx = make_context(variables)
    try:
        matched = run_match(enforced, ctx)
    except PolicyEvaluationError as exc:
        return TryResult(None, None, "error", "", f"match: {exc}")
    if not matched:
        return TryResult(False, None, "skip", "", "")
    try:
        value = run_rule(enforced, ctx)
    except PolicyEvaluationError as exc:
        return TryResult(True, None, "error", "", f"rule: {exc}")
    message = run_message(enforced, ctx, "")
    if spec.kind == "validate":
        decision = "allow" if value else "deny"
    elif spec.kind == LIMIT:
        decision = f"cap {spec.key} at {value}"
    elif spec.kind == PLACEMENT:
        decision = "clusters/regions: " + (", ".join(value) or "none")
    else:
        decision = f"priority class {value}" if value else "no opinion"
    return TryResult(True, value, decision, message, "")


def policy_file_test(policy_file: PolicyFile) -> list[CaseResult]:
    """Every test case of one policy file, run as `manage.py policies_test` runs them.

    Each policy must first pass the checks of a save (`checks.definition_errors`: fields, CEL,
    and the time each expression takes on a sample request with the current fleet, in a child
    process), so no expression that could hold this process runs here; one that fails them
    counts as one failed "(definition)" case, as an invalid policy does in `policies_test`.
    """
    results: list[CaseResult] = []
    checked = PolicyFile(path=policy_file.path, tests=policy_file.tests)
    for definition in policy_file.policies:
        errors = definition_errors(normalise(definition))
        if errors:
            detail = "; ".join(f"{k}: {m}" for k, ms in errors.items() for m in ms)
            results.append(CaseResult(str(definition.get("name")), "(definition)", False,
                                      detail))
        else:
            checked.policies.append(definition)
    return results + run_tests([checked], sample_variables())
