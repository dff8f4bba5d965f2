"""What policies decide, given their specs and a context: pure Python, no database.

The verdict on one request (validate and priority policies), the caps on queues (limit) and
the clusters left to pending workloads (placement), each over many policies sharing one CEL
context. The database side (`submission`, `cycle`, `services`) builds the context and records
the findings; the YAML test runner and the benchmark call the same functions with hand-made
contexts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .celexpr import PolicyEvaluationError, make_context, set_variable
from .rules import (
    AUDIT,
    ENFORCE,
    LIMIT,
    OFF,
    PLACEMENT,
    POLICY_DENIED,
    PRIORITY,
    VALIDATE,
    Finding,
    PolicySpec,
    error_finding,
    run_match,
    run_message,
    run_rule,
)


@dataclass
class RequestOutcome:
    """The verdict of the submission policies on one request."""

    denials: list[Finding] = field(default_factory=list)
    priority_class: str | None = None
    priority_policy: str | None = None
    findings: list[Finding] = field(default_factory=list)
    matched: list[PolicySpec] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials

def evaluate_request(
    policies: Iterable[PolicySpec],
    variables: Mapping[str, Any],
    *,
    fail_open: bool = False,
    grandfathered: bool = False,
    context: Any = None,
) -> RequestOutcome:
    """Run the validate and priority policies on one request.

    `variables` holds request, queue, team, cost_center, fleet, now. `grandfathered`: the
    request updates or restarts an existing workload without growing it, so enforce-mode
    denials are recorded (outcome grandfathered) instead of denying. `context`: a CEL context
    already holding `variables` (built once and reused by the caller).
    """
    out = RequestOutcome()
    path = str(variables.get("request", {}).get("queue", ""))
    ctx = context
    for policy in sorted(policies, key=lambda p: (p.order, p.name)):
        if policy.mode == OFF or policy.kind not in (VALIDATE, PRIORITY):
            continue
        if not policy.applies_to_path(path):
            continue
        if ctx is None:
            ctx = make_context(variables)
        try:
            if not run_match(policy, ctx):
                continue
        except PolicyEvaluationError as exc:
            _record_error(out, policy, error_finding(policy, "match", exc), fail_open,
                          grandfathered)
            continue
        out.matched.append(policy)
        try:
            value = run_rule(policy, ctx)
        except PolicyEvaluationError as exc:
            _record_error(out, policy, error_finding(policy, "rule", exc), fail_open,
                          grandfathered)
            continue
        if policy.kind == VALIDATE:
            if value:
                continue
            message = run_message(policy, ctx, f"policy {policy.name}: rule {policy.rule} is false")
            if policy.mode == ENFORCE and not grandfathered:
                finding = Finding(policy, "denied", POLICY_DENIED, message, policy.rule)
                out.denials.append(finding)
            elif policy.mode == ENFORCE:
                finding = Finding(policy, "grandfathered", POLICY_DENIED, message, policy.rule)
            else:
                finding = Finding(policy, "audited", POLICY_DENIED, message, policy.rule)
            out.findings.append(finding)
            continue
        if value is None:
            continue
        if policy.mode == ENFORCE and out.priority_class is None:
            out.priority_class, out.priority_policy = value, policy.name
            out.findings.append(Finding(
                policy, "prioritized", "", f"policy {policy.name} set priority class {value}",
                policy.rule, value,
            ))
        elif policy.mode == AUDIT:
            requested = variables.get("request", {}).get("priority_class", "")
            if value != requested:
                out.findings.append(Finding(
                    policy, "audited", "",
                    f"policy {policy.name} would set priority class {value} "
                    f"(requested {requested or 'the default'})", policy.rule, value,
                ))
    return out


def _record_error(
    out: RequestOutcome, policy: PolicySpec, finding: Finding, fail_open: bool,
    grandfathered: bool,
) -> None:
    out.findings.append(finding)
    if policy.mode == ENFORCE and not fail_open and not grandfathered:
        out.denials.append(finding)


@dataclass
class CycleOutcome:
    """What the limit and placement policies decided this cycle."""

    # (queue path, key) -> (effective cap, policy name); only enforce-mode policies act.
    caps: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    # workload id -> (allowed cluster names, reason naming the policies)
    placements: dict[int, tuple[set[str], str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)


def evaluate_limits(
    policies: Sequence[PolicySpec],
    queues: Iterable[Mapping[str, Any]],
    base: Mapping[str, Any],
    *,
    fail_open: bool = False,
    out: CycleOutcome | None = None,
    fields: frozenset[str] | None = None,
) -> CycleOutcome:
    """Run limit policies on each queue context (`queue` variable) over the shared `base`.

    `fields`: the only fields of `queue` the policies read (`celexpr.fields_of`), so CEL
    converts no more than those; None: all.

    A cap only lowers: the engine keeps min(configured max, cap). An evaluation error under
    enforce caps the key at 0 (fail closed: nothing new is admitted there; nothing is evicted).
    """
    out = out or CycleOutcome()
    limits = [p for p in policies if p.kind == LIMIT and p.mode != OFF and p.key]
    if not limits:
        return out
    ctx = None
    for queue in queues:
        path = str(queue.get("path", ""))
        active = [p for p in limits if p.applies_to_path(path)]
        if not active:
            continue
        value = _only(queue, fields)
        if ctx is None:
            ctx = make_context({**base, "queue": value})
        else:
            set_variable(ctx, "queue", value)
        for policy in active:
            try:
                if not run_match(policy, ctx):
                    continue
                value = run_rule(policy, ctx)
            except PolicyEvaluationError as exc:
                finding = error_finding(policy, "limit", exc)
                out.findings.append(finding)
                out.subjects.append(path)
                if policy.mode == ENFORCE and not fail_open:
                    _cap(out, path, policy, 0)
                continue
            configured = queue.get("max", {}).get(policy.key)
            lowers = configured is None or value < configured
            message = run_message(
                policy, ctx,
                f"policy {policy.name} caps {path} {policy.key} at {_num(value)} "
                f"(configured max {_num(configured)})",
            )
            if policy.mode == ENFORCE:
                _cap(out, path, policy, value)
                if lowers:
                    out.findings.append(Finding(policy, "capped", "", message, policy.rule, value))
                    out.subjects.append(path)
            elif lowers:
                out.findings.append(Finding(policy, "audited", "", message, policy.rule, value))
                out.subjects.append(path)
    return out


def _only(value: Mapping[str, Any], fields: frozenset[str] | None) -> Mapping[str, Any]:
    if fields is None:
        return value
    return {k: value[k] for k in fields if k in value}


def _num(value: Any) -> str:
    if value is None:
        return "unlimited"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cap(out: CycleOutcome, path: str, policy: PolicySpec, value: float) -> None:
    current = out.caps.get((path, policy.key))
    if current is None or value < current[0]:
        out.caps[(path, policy.key)] = (value, policy.name)


def evaluate_placements(
    policies: Sequence[PolicySpec],
    workloads: Iterable[tuple[int, Mapping[str, Any]]],
    base: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    *,
    fail_open: bool = False,
    out: CycleOutcome | None = None,
    fields: frozenset[str] | None = None,
) -> CycleOutcome:
    """Run placement policies on each pending workload (id, request variables).

    `fields`: the only fields of `request` the policies read; None: all.

    The rule names clusters or regions; a workload may use the clusters named, or lying in a
    region named, by every enforce-mode policy that matches it. An evaluation error under
    enforce allows no cluster (fail closed: the workload waits, with the reason).
    """
    out = out or CycleOutcome()
    placements = [p for p in policies if p.kind == PLACEMENT and p.mode != OFF]
    if not placements:
        return out
    ctx = None
    every = {c["name"] for c in clusters}
    # With `fields` known, workloads with equal values of those fields get equal answers (the
    # rest of the context is shared): each distinct request is evaluated once.
    memo: dict[tuple[Any, ...], list[tuple[PolicySpec, str, Any, str]]] = {}
    for workload_id, request in workloads:
        path = str(request.get("queue", ""))
        active = [p for p in placements if p.applies_to_path(path)]
        if not active:
            continue
        value = _only(request, fields)
        key = None
        results = None
        if fields is not None:
            key = (tuple(p.name for p in active), _canonical(value))
            results = memo.get(key)
        if results is None:
            if ctx is None:
                ctx = make_context({**base, "request": value})
            else:
                set_variable(ctx, "request", value)
            results = []
            for policy in active:
                try:
                    if not run_match(policy, ctx):
                        continue
                    names = run_rule(policy, ctx)
                except PolicyEvaluationError as exc:
                    results.append((policy, "error", exc, ""))
                    continue
                wanted = set(names)
                reason = run_message(
                    policy, ctx,
                    f"policy {policy.name} allows only {', '.join(sorted(wanted)) or 'no cluster'}",
                )
                results.append((policy, "ok", names, reason))
            if key is not None:
                memo[key] = results
        subject = str(request.get("name", workload_id))
        for policy, status, names, reason in results:
            if status == "error":
                out.findings.append(error_finding(policy, "placement", names))
                out.subjects.append(subject)
                if policy.mode == ENFORCE and not fail_open:
                    _restrict(out, workload_id, set(), f"policy {policy.name} failed: {names}")
                continue
            wanted = set(names)
            allowed = {c["name"] for c in clusters
                       if c["name"] in wanted or (c.get("region") and c["region"] in wanted)}
            if policy.mode == ENFORCE:
                _restrict(out, workload_id, allowed, reason)
            elif allowed != every:
                out.findings.append(Finding(policy, "audited", "", reason, policy.rule, names))
                out.subjects.append(subject)
    return out


def _canonical(value: Any) -> Any:
    """A hashable, order-independent form of a context value."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, set | frozenset):
        return tuple(sorted(_canonical(v) for v in value))
    return (type(value).__name__, value)


def _restrict(out: CycleOutcome, workload_id: int, allowed: set[str], reason: str) -> None:
    if workload_id in out.placements:
        previous, previous_reason = out.placements[workload_id]
        out.placements[workload_id] = (previous & allowed, f"{previous_reason}; {reason}")
    else:
        out.placements[workload_id] = (allowed, reason)
