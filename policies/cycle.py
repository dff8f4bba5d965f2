"""The cycle adjuster (`scheduling.extensions`): limit and placement policies in every
scheduling cycle.

They only narrow what pending work may get (a lower max for a queue key, fewer clusters for a
workload): nothing admitted is evicted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings

from core import changes, db
from quotas.models import Queue, Team

from .active import active_specs
from .celexpr import fields_of
from .cost_center import EMPTY_COST_CENTER, cost_center_variables
from .evaluation import CycleOutcome, evaluate_limits, evaluate_placements
from .models import CYCLE_KINDS, TeamApproval
from .rules import Finding, PolicySpec
from .services import violations_record_many
from .variables import (
    EMPTY_QUEUE,
    EMPTY_REQUEST,
    EMPTY_TEAM,
    admitted_usage_by_leaf,
    fleet_variables,
    now_variables,
    queue_variables_many,
)

# Cycle findings repeat every few seconds while nothing changes: each distinct one is recorded
# once per this many seconds (per process), so the violations list stays readable.
CYCLE_RECORD_EVERY_S = 3600.0
_recent: dict[tuple[Any, ...], float] = {}


def _fresh(finding: Finding, subject: str) -> bool:
    key = (finding.policy.id, finding.policy.version, subject, finding.outcome, finding.message)
    now = time.monotonic()
    if now - _recent.get(key, -1e18) < CYCLE_RECORD_EVERY_S:
        return False
    if len(_recent) > 100_000:
        _recent.clear()
    _recent[key] = now
    return True


# Request fields PendingInfo does not carry: read from the database only if a rule names one.
_EXTRA_FIELDS = ("pods", "preemptible", "checkpoint", "image", "duration_s", "pod_sets",
                 "interactive")


def _pending_requests(
    pending: Sequence[Any], *, with_extra: bool = True,
) -> list[tuple[int, dict[str, Any]]]:
    """`request` for pending workloads (one query for what PendingInfo does not carry)."""
    from django.db.models import Sum  # noqa: PLC0415

    from scheduling.models import Workload  # noqa: PLC0415

    extra = {}
    if with_extra:
        extra = {
            row["id"]: row for row in Workload.objects.filter(
                pk__in=db.in_array([p.id for p in pending], "bigint")
            ).values("id", "preemptible", "checkpoint", "duration_hint_s", "image",
                     "interactive").annotate(pods=Sum("pod_sets__count"))
        }
    out = []
    for p in pending:
        row: dict[str, Any] = dict(extra.get(p.id, {}))
        request = dict(EMPTY_REQUEST)
        request.update({
            "name": p.name, "queue": p.queue_path, "team": p.team or "", "user": p.owner,
            "flavors": list(p.flavors), "gpus": int(p.gpus), "pods": int(row.get("pods") or 0),
            "priority_class": p.priority_class, "dataset": p.dataset,
            "labels": {str(k): str(v) for k, v in (p.labels or {}).items()},
            "preemptible": bool(row.get("preemptible", True)),
            "checkpoint": bool(row.get("checkpoint", True)),
            "image": row.get("image") or "",
            "duration_s": int(row.get("duration_hint_s") or 0),
            "interactive": bool(row.get("interactive", False)),
        })
        out.append((p.id, request))
    return out


def cycle_evaluate(
    specs: Sequence[PolicySpec], *, now: Any, queue_paths: Sequence[str], clusters: Sequence[str],
    pending: Sequence[Any], quota_max: Mapping[tuple[str, str], Any] | None = None,
) -> tuple[CycleOutcome, dict[str, Any]]:
    """Evaluate the limit and placement policies over the DB's current state.

    Returns the outcome and, for each subject of a finding (queue path or workload name), the
    input it was evaluated on (recorded with the violation).
    """
    fail_open = settings.ALLOT_POLICY_FAIL_OPEN
    usage = admitted_usage_by_leaf()
    fleet = fleet_variables(usage)
    base = {"request": EMPTY_REQUEST, "queue": EMPTY_QUEUE, "team": EMPTY_TEAM,
            "cost_center": EMPTY_COST_CENTER, "fleet": fleet, "now": now_variables(now)}
    out = CycleOutcome()
    queue_inputs: dict[str, Any] = {}
    request_inputs: dict[str, Any] = {}
    limits = [s for s in specs if s.kind == "limit"]
    if limits:
        paths = [p for p in queue_paths if any(s.applies_to_path(p) for s in limits)]
        queues = list(Queue.objects.filter(path__in=db.in_array(paths, "text")).only(
            "path", "name"))
        qvars = queue_variables_many(queues, fleet=fleet, usage_by_leaf=usage)
        # The engine's max may already be lower (a capacity request, another adjuster).
        for (qpath, key), value in (quota_max or {}).items():
            if qpath in qvars and value is not None:
                current = qvars[qpath]["max"].get(key, value)
                qvars[qpath]["max"][key] = _plain_number(min(current, float(value)))
        evaluate_limits(limits, qvars.values(), base, fail_open=fail_open, out=out,
                        fields=fields_of(_sources(limits), "queue"))
        queue_inputs = qvars
    placements = [s for s in specs if s.kind == "placement"]
    team_bases: dict[str, dict[str, Any]] = {}
    if placements and pending:
        from scheduling.models import Cluster  # noqa: PLC0415

        wanted = set(clusters)
        cluster_rows = [c for c in fleet["clusters"] if c["name"] in wanted] or [
            {"name": c.name, "region": c.region}
            for c in Cluster.objects.filter(name__in=clusters)
        ]
        by_team: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        in_scope = [p for p in pending
                    if any(s.applies_to_path(p.queue_path) for s in placements)]
        request_fields = fields_of(_sources(placements), "request")
        sources = " ".join(f"{s.match} {s.rule} {s.message}" for s in placements)
        with_extra = any(f in sources for f in _EXTRA_FIELDS)
        for workload_id, request in _pending_requests(in_scope, with_extra=with_extra):
            by_team.setdefault(request["team"], []).append((workload_id, request))
            request_inputs[request["name"]] = request
        teams = {t.name: t for t in Team.objects.filter(name__in=list(by_team))}
        approvals: dict[str, list[str]] = {}
        for a in TeamApproval.objects.filter(team__name__in=list(by_team)).select_related("team"):
            if a.expires_at is None or a.expires_at > now:
                approvals.setdefault(a.team.name, []).append(a.name)
        for team_name, group in by_team.items():
            team = teams.get(team_name)
            team_base = dict(base)
            if team is not None:
                team_base["team"] = {
                    "name": team_name, "display_name": team.display_name or team_name,
                    "department": "", "approvals": sorted(approvals.get(team_name, []))}
                team_base["cost_center"] = cost_center_variables(team, now=now)
            team_bases[team_name] = team_base
            evaluate_placements(placements, group, team_base, cluster_rows,
                                fail_open=fail_open, out=out, fields=request_fields)
    inputs: dict[str, Any] = {}
    for subject in set(out.subjects):
        if subject in queue_inputs:
            inputs[subject] = {**base, "queue": queue_inputs[subject]}
        elif subject in request_inputs:
            request = request_inputs[subject]
            inputs[subject] = {**team_bases.get(request["team"], base), "request": request}
    return out, inputs


def _sources(specs: Sequence[PolicySpec]) -> list[str]:
    return [src for s in specs for src in (s.match, s.rule, s.message)]


def _plain_number(value: float) -> Any:
    return int(value) if float(value).is_integer() else value


def policy_cycle_adjuster(ctx: Any) -> None:
    """The cycle adjuster: lower maxes for limit policies, narrow clusters for placements."""
    changes.prune()
    specs = active_specs(CYCLE_KINDS)
    if not specs:
        return
    out, inputs = cycle_evaluate(
        specs, now=ctx.now, queue_paths=ctx.queue_paths, clusters=ctx.clusters,
        pending=ctx.pending, quota_max=ctx.quota_max,
    )
    by_name = {s.name: s for s in specs}
    unaccounted: set[tuple[str, str]] = set()
    for (path, key), (value, policy) in out.caps.items():
        if (path, key) not in ctx.quota_max:
            # No queue of the tree sets this key: the engine has no max to lower.
            unaccounted.add((policy, path))
            out.findings.append(Finding(
                by_name[policy], "error", "POLICY_ERROR",
                f"policy {policy} caps {key}, which no queue of the tree sets (not "
                "quota-accounted): set it on a queue, or cap another key", by_name[policy].rule))
            out.subjects.append(path)
            continue
        ctx.lower_max(path, key, value, policy=policy)
    if unaccounted:
        kept = [(f, s) for f, s in zip(out.findings, out.subjects, strict=True)
                if not (f.outcome == "capped" and (f.policy.name, s) in unaccounted)]
        out.findings, out.subjects = [f for f, _ in kept], [s for _, s in kept]
    for workload_id, (allowed, reason) in out.placements.items():
        ctx.restrict_clusters(workload_id, allowed, reason=reason)
    if not getattr(ctx, "record", True):
        return  # a forecast reading the cycle's view: the cycle itself records
    items = []
    for finding, subject in zip(out.findings, out.subjects, strict=True):
        if _fresh(finding, subject):
            variables = inputs.get(subject, {})
            path = variables.get("queue", {}).get("path", "") or variables.get(
                "request", {}).get("queue", "")
            items.append((finding, subject, str(path), variables))
    if items:
        violations_record_many(items=items, at=ctx.now)
