"""Policy changes in a what-if (scheduling/whatif): what a new or edited policy would do to the
work of the next hours, as concrete edits of the what-if's scenario.

`whatif_policy_effects(changes, workloads)` (registered in `scheduling.extensions`) takes the
what-if's `policies` list: each item a policy definition (the fields of a policy file), either
a new policy (name, kind, rule and the rest) or an existing one by name with the fields to
change merged over it. Each is checked as a save checks it (400 naming the field) and then
evaluated as enforced unless its mode says audit (an audit policy changes nothing: it is
reported, not applied):

- validate: each submission of the scenario not admitted yet (the pending work and, with
  `repeat_past`, the past's submissions again) whose rule is false is denied: left out of the
  changed replay, and counted;
- priority: such a submission gets the class the rule names (first by order);
- limit: a queue's key max is lowered to the cap for the whole replay.

Placement policies and turning a policy off are refused (field `policies[i].kind` or
`.mode`): the scenario format has no per-workload cluster list, and the work a policy denied
is not in the live state to bring back.
Each submission is evaluated with its own request and today's queue, team, cost-center and
fleet values, as the policy replay does (`selectors.policy_replay`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.utils import timezone

from .checks import definition_errors
from .cost_center import cost_center_variables
from .evaluation import evaluate_limits, evaluate_request
from .models import Policy
from .rules import AUDIT, LIMIT, OFF, PLACEMENT, PRIORITY, VALIDATE, PolicySpec
from .services import policy_content
from .specs import normalise, to_spec
from .variables import (
    admitted_usage_by_leaf,
    fleet_variables,
    now_variables,
    queue_variables_many,
    sample_variables,
    team_variables,
    workload_request_variables,
)


class PolicyChangeError(ValueError):
    """Policy changes that cannot be tried: `problems` maps `policies[i].field` to messages."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in problems.items()))
        self.problems = problems


def changed_specs(changes: Sequence[Any]) -> list[PolicySpec]:
    """The what-if's policies as specs (checked; PolicyChangeError names each bad field)."""
    problems: dict[str, list[str]] = {}
    specs: list[PolicySpec] = []
    if not isinstance(changes, list | tuple):
        raise PolicyChangeError({"policies": ["expected a list of policy definitions"]})
    for i, ch in enumerate(changes):
        where = f"policies[{i}]"
        if not isinstance(ch, Mapping):
            problems[where] = ["expected a policy definition (an object)"]
            continue
        existing = Policy.objects.filter(name=str(ch.get("name", ""))).first()
        definition = normalise({**(policy_content(existing) if existing else
                                   {"mode": "enforce"}), **ch})
        errors = definition_errors(definition)
        if definition["kind"] == PLACEMENT:
            errors.setdefault("kind", []).append(
                "placement policies cannot be tried in a what-if (the scenario has no "
                "per-workload clusters): try it with the policy replay")
        if definition["mode"] == OFF:
            errors.setdefault("mode", []).append(
                "turning a policy off cannot be tried: the work it denied is not in the "
                "live state")
        for field, messages in errors.items():
            problems[f"{where}.{field}"] = list(messages)
        if not errors:
            specs.append(to_spec(definition))
    if problems:
        raise PolicyChangeError(problems)
    return specs


def whatif_policy_effects(changes: Sequence[Any], workloads: Mapping[str, int],
                          limit_keys: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The edits the policies make to the changed scenario (module docstring).

    `workloads`: scenario name -> workload id, for the submissions not admitted yet;
    `limit_keys`: queue path -> {"flavor/resource": configured max} (None: unlimited).
    Returns {"policies": [names], "deny": {name: message}, "priority": {name: class},
    "caps": [{queue, key, max, policy}], "audited": [lines]}."""
    from scheduling.models import Workload  # noqa: PLC0415

    specs = changed_specs(changes)
    now = timezone.now()
    out: dict[str, Any] = {"policies": [s.name for s in specs], "deny": {}, "priority": {},
                           "caps": [], "audited": []}
    usage = admitted_usage_by_leaf()
    fleet = fleet_variables(usage)
    requests = [s for s in specs if s.kind in (VALIDATE, PRIORITY)]
    if requests and workloads:
        by_id = {wid: name for name, wid in workloads.items()}
        queue_cache: dict[str, Any] = {}
        team_cache: dict[Any, tuple[Any, Any]] = {}
        rows = (Workload.objects.filter(pk__in=list(by_id))
                .select_related("queue", "team", "owner", "priority_class")
                .prefetch_related("pod_sets"))
        for w in rows.iterator(chunk_size=500):
            path = w.queue.path
            if not any(s.applies_to_path(path) for s in requests):
                continue
            if path not in queue_cache:
                queue_cache[path] = queue_variables_many(
                    [w.queue], fleet=fleet, usage_by_leaf=usage)[path]
            if w.team_id not in team_cache:
                team_cache[w.team_id] = (team_variables(w.team, now=now),
                                         cost_center_variables(w.team))
            team_vars, cost_vars = team_cache[w.team_id]
            variables = {"request": workload_request_variables(w), "queue": queue_cache[path],
                         "team": team_vars, "cost_center": cost_vars, "fleet": fleet,
                         "now": now_variables(w.submitted_at)}
            verdict = evaluate_request(requests, variables)
            name = by_id[w.pk]
            if verdict.denials:
                out["deny"][name] = verdict.denials[0].message
            elif verdict.priority_class:
                current = w.priority_class.name if w.priority_class else ""
                if verdict.priority_class != current:
                    out["priority"][name] = verdict.priority_class
            out["audited"].extend(f"{name}: {f.message}" for f in verdict.findings
                                  if f.outcome == "audited")
    limits = [s for s in specs if s.kind == LIMIT]
    if limits:
        from quotas.models import Queue  # noqa: PLC0415

        qvars = queue_variables_many(list(Queue.objects.filter(path__in=list(limit_keys))),
                                     fleet=fleet, usage_by_leaf=usage)
        base = {**sample_variables(now), "fleet": fleet}
        caps = evaluate_limits(limits, qvars.values(), base)
        for (path, key), (value, policy) in sorted(caps.caps.items()):
            configured = limit_keys.get(path, {}).get(key)
            if configured is None or value < configured:
                out["caps"].append({"queue": path, "key": key, "max": value,
                                    "policy": policy})
        out["audited"].extend(f.message for f in caps.findings if f.outcome == "audited")
    out["audited"] = out["audited"][:50]
    if any(s.mode == AUDIT for s in specs):
        out["audited"].insert(0, "audit-mode policies are reported, not applied")
    return out
