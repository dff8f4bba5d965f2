"""Where policies run: the submission check and the cycle adjuster (scheduling.extensions).

Registered in `PoliciesConfig.ready()`. Validate and priority policies run at submission
(form and API go through the same `workload_submit`); limit and placement policies run in
every scheduling cycle, and only narrow what pending work may get: nothing admitted is evicted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.expressions import RawSQL
from django.utils import timezone

from core import changes
from quotas.models import Queue, Team

from .celexpr import fields_of, make_context, referenced_roots, set_variable
from .context import cached_submission_variables, submission_variables
from .context_rows import policy_stamp
from .cost_center import EMPTY_COST_CENTER, cost_center_variables
from .evaluation import CycleOutcome, evaluate_limits, evaluate_placements, evaluate_request
from .models import CYCLE_KINDS, SUBMISSION_KINDS, Policy, PolicyMode, TeamApproval
from .rules import Finding, PolicySpec
from .services import (
    policy_counts_add,
    policy_to_spec,
    violations_record,
    violations_record_many,
)
from .variables import (
    EMPTY_QUEUE,
    EMPTY_REQUEST,
    EMPTY_TEAM,
    admitted_usage_by_leaf,
    fleet_variables,
    now_variables,
    queue_variables_many,
    request_variables,
)

_spec_cache: dict[tuple[str, ...], tuple[Any, Any]] = {}


Active = tuple[list[PolicySpec], frozenset[str], "frozenset[str] | None"]


def _load_specs(kinds: Sequence[str]) -> Active:
    specs = [policy_to_spec(p) for p in Policy.objects.filter(kind__in=kinds).exclude(
        mode=PolicyMode.OFF)]
    sources = [src for spec in specs for src in (spec.match, spec.rule, spec.message)]
    return specs, frozenset(_needs(specs)), fields_of(sources, "request")


def _in_scope(specs: Sequence[PolicySpec], path: str) -> Active:
    here = [s for s in specs if s.applies_to_path(path)]
    sources = [src for spec in here for src in (spec.match, spec.rule, spec.message)]
    return here, frozenset(_needs(here)), fields_of(sources, "request")


def _trimmed(value: Mapping[str, Any], fields: frozenset[str] | None) -> Mapping[str, Any]:
    """Only the fields the rules read (None: all), so CEL converts no more than that."""
    if fields is None:
        return value
    return {k: value[k] for k in fields if k in value}


def _active(kinds: Sequence[str], view: Any) -> Active:
    """The policies of these kinds that are not off, the variables they read, and the fields
    of `request` they read (None: more than fields)."""
    key = tuple(sorted(kinds))
    if view is not None:
        return view.get("policy", ("specs", key), lambda: _load_specs(key))
    # Off PostgreSQL: a one-row stamp (count, versions, last change, last id) guards the cache.
    from django.db.models import Count, Max, Sum  # noqa: PLC0415

    stamp: Any = policy_stamp()
    if stamp is None:
        stamp = tuple(Policy.objects.aggregate(n=Count("id"), v=Sum("version"),
                                               at=Max("updated_at"), last=Max("id")).values())
    cached = _spec_cache.get(key)
    if cached is None or cached[0] != stamp:
        cached = _spec_cache[key] = (stamp, _load_specs(key))
    return cached[1]  # type: ignore[no-any-return]


def active_specs(kinds: Sequence[str]) -> list[PolicySpec]:
    """The policies of these kinds that are not off.

    Cached per process and kept exact by the change log (`changes`): a change saved anywhere
    takes effect on the next submission or cycle.
    """
    return _active(kinds, changes.validate())[0]


# --- submission ---------------------------------------------------------------------------


def _needs(specs: Sequence[PolicySpec]) -> set[str]:
    """The context variables these policies read."""
    needs: set[str] = set()
    for spec in specs:
        for src in (spec.match, spec.rule, spec.message):
            needs |= referenced_roots(src)
    return needs


def _totals(request: Mapping[str, Any]) -> tuple[float, ...]:
    return (request["gpus"], request["pods"], request["cpu"], request["memory_gib"])


def _previous_request(ctx: Any) -> dict[str, Any] | None:
    """What an update or restart replaces: the context's `previous` (a request mapping, set by
    scheduling.updates), else the input's `previous` or the stored workload its `workload_id`
    names."""
    raw = ctx.request
    previous = getattr(ctx, "previous", None) or raw.get("previous")
    if isinstance(previous, Mapping):
        return request_variables(previous)
    workload_id = raw.get("workload_id")
    if workload_id:
        from scheduling.models import Workload  # noqa: PLC0415

        workload = Workload.objects.filter(pk=workload_id).select_related(
            "queue", "priority_class").prefetch_related("pod_sets").first()
        if workload is not None:
            return request_variables({
                "queue": workload.queue.path, "priority_class": workload.priority_class.name,
                "preemptible": workload.preemptible,
                "pods": [{"count": p.count, "gpus": p.gpus, "cpu": p.cpu,
                          "memory_gib": p.memory_gib, "flavors": p.flavors}
                         for p in workload.pod_sets.all()]})
    return None


def grows(request: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bool:
    """Whether an update asks for more than the workload it replaces (unknown: it does).

    More GPUs, pods, CPU or memory, a flavor it did not accept, another queue, a higher
    priority class, or no longer preemptible: each is asking for more than what was admitted
    under the old rules.
    """
    if previous is None:
        return True
    if any(new > old for new, old in zip(_totals(request), _totals(previous), strict=True)):
        return True
    if not set(request["flavors"]) <= set(previous["flavors"]):
        return True
    if previous.get("queue") and request.get("queue") and request["queue"] != previous["queue"]:
        return True
    if _higher_class(request.get("priority_class"), previous.get("priority_class")):
        return True
    return bool(previous.get("preemptible", True) and not request.get("preemptible", True))


def _higher_class(new: str | None, old: str | None) -> bool:
    """Whether priority class `new` ranks above `old` (an unknown one does)."""
    if not new or not old or new == old:
        return False
    from scheduling.models import PriorityClass  # noqa: PLC0415

    values = dict(PriorityClass.objects.filter(name__in=[new, old]).values_list("name", "value"))
    if new not in values or old not in values:
        return True
    return values[new] > values[old]


class _Reused:
    """A CEL context kept for a queue and team while their queue and fleet values hold; the
    other variables are replaced in it when they differ from the last submission's."""

    def __init__(self, variables: Mapping[str, Any]) -> None:
        self.context = make_context(variables)
        self.values = dict(variables)


def _reused_context(
    view: Any, variables: Mapping[str, Any], queue_path: str, team_id: Any, needs: Any,
) -> Any:
    # Kept over usage changes too: only the variables that differ are converted again.
    reused = view.derive(("cel", queue_path, team_id, needs), frozenset({"config"}),
                         lambda: _Reused(variables))
    for name in ("request", "team", "cost_center", "now", "queue", "fleet"):
        value = variables[name]
        previous = reused.values.get(name)
        if previous is not value and previous != value:
            set_variable(reused.context, name, value)
            reused.values[name] = value
    return reused.context


def policy_submission_check(ctx: Any) -> Any:
    """The submission check: deny, impose a priority class, record audits and errors.

    On PostgreSQL a warm check runs one small query (the change log: did anything it cached
    change?) and reads only the context pieces that changed, in one more.
    """
    from scheduling.extensions import SubmissionVerdict  # noqa: PLC0415

    now = timezone.now()
    view = changes.validate()
    specs, needs, request_fields = _active(SUBMISSION_KINDS, view)
    if view is not None and any(s.scope for s in specs):
        # Policies scoped to other subtrees neither run nor make the context read anything.
        specs, needs, request_fields = view.get(
            "policy", ("in scope", ctx.queue.path), lambda: _in_scope(specs, ctx.queue.path))
    if not specs:
        return None
    if view is not None:
        variables = cached_submission_variables(
            view, data=ctx.request, queue=ctx.queue, team=ctx.team, user=ctx.user,
            is_update=ctx.is_update, now=now, needs=needs)
    else:
        variables = submission_variables(
            data=ctx.request, queue=ctx.queue, team=ctx.team, user=ctx.user,
            is_update=ctx.is_update, now=now, needs=needs)
    grandfathered = bool(ctx.is_update) and not grows(
        variables["request"], _previous_request(ctx))
    cel_context = None
    if view is not None:
        cel_context = _reused_context(
            view, {**variables, "request": _trimmed(variables["request"], request_fields)},
            ctx.queue.path, ctx.team.pk if ctx.team is not None else None, needs)
    outcome = evaluate_request(specs, variables, fail_open=settings.ALLOT_POLICY_FAIL_OPEN,
                               grandfathered=grandfathered, context=cel_context)
    findings = list(outcome.findings)
    if outcome.priority_class is not None:
        from scheduling.models import PriorityClass  # noqa: PLC0415

        if not PriorityClass.objects.filter(name=outcome.priority_class).exists():
            policy = next(s for s in specs if s.name == outcome.priority_policy)
            known = ", ".join(PriorityClass.objects.values_list("name", flat=True))
            error = Finding(
                policy, "error", "POLICY_ERROR",
                f"policy {policy.name} returned unknown priority class "
                f"{outcome.priority_class!r} (known: {known})", policy.rule,
            )
            findings = [f for f in findings if f.outcome != "prioritized"] + [error]
            outcome.priority_class = None
            if policy.mode == "enforce" and not settings.ALLOT_POLICY_FAIL_OPEN:
                outcome.denials.append(error)
    violations_record(
        findings=findings, variables=variables, subject=variables["request"]["name"],
        queue_path=ctx.queue.path, user=ctx.user,
        workload_id=getattr(ctx, "replaces", None),
    )
    hit_ids = [p.id for p in outcome.matched if p.id is not None]
    denied_ids = [f.policy.id for f in outcome.denials if f.policy.id is not None]
    if hit_ids or denied_ids:
        # After commit, and buffered: counting inside the submission's transaction would lock
        # the policy rows, serialising every concurrent submission until it commits.
        transaction.on_commit(lambda: policy_counts_add(hit_ids=hit_ids, denied_ids=denied_ids))
    denied = {id(f) for f in outcome.denials}
    return SubmissionVerdict(
        deny=[(f.code, f"{f.message} (policy {f.policy.name})") for f in outcome.denials],
        priority_class=outcome.priority_class,
        audit=[f"policy {f.policy.name} ({f.policy.mode}): {f.outcome}: {f.message}"
               for f in findings if id(f) not in denied and f.outcome != "prioritized"],
    )


# --- scheduling cycle -----------------------------------------------------------------------

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
_EXTRA_FIELDS = ("pods", "preemptible", "checkpoint", "image", "duration_s", "pod_sets")


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
                pk__in=_any([p.id for p in pending], "bigint")
            ).values("id", "preemptible", "checkpoint", "duration_hint_s", "image"
                     ).annotate(pods=Sum("pod_sets__count"))
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
        queues = list(Queue.objects.filter(path__in=_any(paths, "text")).only("path", "name"))
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


def _any(values: list[Any], sql_type: str) -> Any:
    """`values` for a `__in` lookup: on PostgreSQL one array parameter, not a placeholder per
    value (thousands of them cost the driver more than the query)."""
    from django.db import connection  # noqa: PLC0415

    if connection.vendor == "postgresql":
        return RawSQL(f"SELECT unnest(%s::{sql_type}[])", [list(values)])
    return values


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
    items = []
    for finding, subject in zip(out.findings, out.subjects, strict=True):
        if _fresh(finding, subject):
            variables = inputs.get(subject, {})
            path = variables.get("queue", {}).get("path", "") or variables.get(
                "request", {}).get("queue", "")
            items.append((finding, subject, str(path), variables))
    if items:
        violations_record_many(items=items, at=ctx.now)


def register() -> None:
    """Plug the check and the adjuster into scheduling (called from AppConfig.ready)."""
    try:
        from scheduling import extensions  # noqa: PLC0415
    except ImportError:  # scheduling without hooks: nothing to plug into
        return
    extensions.register_submission_check(policy_submission_check)
    extensions.register_cycle_adjuster(policy_cycle_adjuster)
