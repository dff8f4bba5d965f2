"""The submission check (`scheduling.extensions`): validate and priority policies on one
request, before anything is saved (form and API go through the same `workload_submit`).

It denies, imposes a priority class, records audits and errors; an update or restart that does
not grow what it replaces is grandfathered (recorded, not denied).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import changes

from .active import active_policies, in_scope
from .celexpr import make_context, set_variable
from .context import cached_submission_variables, submission_variables
from .evaluation import evaluate_request
from .models import SUBMISSION_KINDS
from .rules import Finding
from .services import policy_counts_add, violations_record
from .variables import request_variables


def _trimmed(value: Mapping[str, Any], fields: frozenset[str] | None) -> Mapping[str, Any]:
    """Only the fields the rules read (None: all), so CEL converts no more than that."""
    if fields is None:
        return value
    return {k: value[k] for k in fields if k in value}


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
    specs, needs, request_fields = active_policies(SUBMISSION_KINDS, view)
    if view is not None and any(s.scope for s in specs):
        # Policies scoped to other subtrees neither run nor make the context read anything.
        specs, needs, request_fields = view.get(
            "policy", ("in scope", ctx.queue.path), lambda: in_scope(specs, ctx.queue.path))
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
        priority_policy=(outcome.priority_policy or "") if outcome.priority_class else "",
        audit=[f"policy {f.policy.name} ({f.policy.mode}): {f.outcome}: {f.message}"
               for f in findings if id(f) not in denied and f.outcome != "prioritized"],
    )
