"""Restarting an ended workload and changing a pending one: a workload's update path.

Both go through the submission rules (`workload_submit`'s validation, the registered submission
checks, the engine's request check) as an update of the existing workload: the checks see
`is_update`, the workload replaced and its previous request (`extensions.submission_update`),
so a newly tightened policy does not deny what does not grow (it is recorded as grandfathered
instead), while growing is judged as a new request.

- `workload_resubmit`: a finished, failed or cancelled workload (or a rejected one, judged as a
  new request: it was never accepted under the old rules) runs again as a new workload with the
  same request, optionally changed; the two are linked by events (payload `replaces` /
  `replaced_by`).
- `workload_update`: a pending workload's request changes in place (same id, same place in its
  queue's order). Refused changes leave it as it was; the reasons are returned and recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from core.quantity import QuantityError, resource_quantities, to_base
from scheduling import enqueue, extensions
from scheduling.backends.naming import LABEL_GANG_OF
from scheduling.fleet import scaling
from scheduling.locks import scheduling_lock
from scheduling.models import (
    TERMINAL_STATES,
    EventCode,
    EventType,
    PodSet,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.request.approvals import approval_reason
from scheduling.request.cancel import user_may_manage
from scheduling.request.check import RequestChecker
from scheduling.request.lookups import SubmitLookups, policy_priority_class
from scheduling.request.manifests import gang_manifests
from scheduling.request.submission import workload_submit
from scheduling.request.validation import _validate, gpus_shown

S = WorkloadState

# The submission fields (POST /api/v1/workloads) a restart may change.
RESUBMIT_FIELDS = frozenset({
    "name", "queue", "priority_class", "preemptible", "checkpoint", "strategy", "image",
    "command", "dataset", "duration_hint_s", "termination_grace_s", "topology", "labels", "pods",
    "manifest", "flavors", "interactive", "idle_timeout_s", "time_limit_s",
})
# A pending workload may change all of them but its queue (moving is cancel + resubmit).
UPDATE_FIELDS = RESUBMIT_FIELDS - {"queue"}
# Ended workloads accepted under the rules of their time: their restart is an update.
GRANDFATHERED_STATES = (S.FINISHED, S.FAILED, S.CANCELLED)


def workload_input(workload: Workload) -> dict[str, Any]:
    """A stored workload as a submission (the input of POST /api/v1/workloads)."""
    if workload.kind:
        # Submitted as a manifest: its pod sets come from it, their flavors are the choice.
        sets = sorted(workload.pod_sets.all(), key=lambda p: p.index)
        common = {k: v for k, v in _plain_input(workload).items()
                  if k not in ("image", "command", "pods")}
        return {**common, "manifest": dict(workload.manifest),
                "flavors": list(sets[0].flavors) if sets else None}
    return _plain_input(workload)


def _plain_input(workload: Workload) -> dict[str, Any]:
    return {
        "name": workload.name, "queue": workload.queue.path,
        "priority_class": workload.priority_class.name, "preemptible": workload.preemptible,
        "checkpoint": workload.checkpoint, "strategy": workload.strategy,
        "image": workload.image, "command": list(workload.command or []),
        "dataset": workload.dataset, "duration_hint_s": workload.duration_hint_s,
        "termination_grace_s": workload.termination_grace_s,
        "topology": dict(workload.topology or {}), "labels": dict(workload.labels or {}),
        "interactive": workload.interactive, "idle_timeout_s": workload.idle_timeout_s,
        "time_limit_s": workload.time_limit_s,
        "pods": [
            {"count": p.count, "flavors": list(p.flavors), "gpus": p.gpus, "cpu": p.cpu,
             "memory_gib": p.memory_gib, "gpu_memory_gib": p.gpu_memory_gib,
             **({"resources": resource_quantities(p.resources)} if p.resources else {})}
            for p in sorted(workload.pod_sets.all(), key=lambda p: p.index)
        ],
    }


def _plain_resources(raw: Any) -> Any:
    """Extended resources compared by value (base units), as written otherwise."""
    if not isinstance(raw, Mapping):
        return raw or ()
    try:
        return tuple(sorted((str(k), to_base(str(k), v)) for k, v in raw.items()))
    except QuantityError:
        return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def _plain_pods(pods: Any) -> Any:
    """Pod sets compared by value: defaults filled in, numbers as Decimal."""
    if not isinstance(pods, list):
        return pods
    out = []
    for p in pods:
        if not isinstance(p, Mapping):
            return pods
        try:
            out.append((int(p.get("count", 1)), tuple(p.get("flavors") or ()),
                        Decimal(str(p.get("gpus", 0) or 0)), Decimal(str(p.get("cpu", 0) or 0)),
                        Decimal(str(p.get("memory_gib", 0) or 0)), p.get("gpu_memory_gib"),
                        _plain_resources(p.get("resources"))))
        except (TypeError, ValueError, ArithmeticError):
            return pods
    return out


def _changed(changes: Mapping[str, Any], previous: Mapping[str, Any]) -> list[str]:
    """The fields of `changes` whose value differs from the workload's."""
    out = []
    for name, value in changes.items():
        old = previous.get(name)
        if name == "pods":
            value, old = _plain_pods(value), _plain_pods(old)
        if value != old:
            out.append(name)
    return sorted(out)


def _check_fields(changes: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    if not isinstance(changes, Mapping):
        raise ValidationError({"non_field_errors": ["expected a JSON object"]})
    errors = {}
    for name in sorted(set(changes) - allowed):
        if name == "queue":
            errors[name] = ["a pending workload cannot move to another queue: cancel it and "
                            "resubmit it to that queue"]
        else:
            errors[name] = [f"unknown field: {what} takes {', '.join(sorted(allowed))}"]
    if errors:
        raise ValidationError(errors)


def _locked(user: Any, workload: Workload) -> Workload:
    workload = (Workload.objects.select_for_update(of=("self",))
                .select_related("queue", "team", "owner", "priority_class")
                .prefetch_related("pod_sets").get(pk=workload.pk))
    if not user_may_manage(user, workload):
        raise PermissionDenied("only the owner, a lead of its team or an admin may change or "
                               f"resubmit workload {workload.name}")
    return workload


@transaction.atomic
def workload_resubmit(
    *, user: Any, workload: Workload, changes: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Workload:
    """Run an ended workload again as a new workload (its request, with `changes`).

    The new workload is submitted like any other (it may be rejected, with the reasons); for a
    finished, failed or cancelled one the submission checks see it as an update of the old one.
    Raises ValidationError (bad or unknown fields, a workload that has not ended) and
    PermissionDenied; nothing is saved then.
    """
    changes = dict(changes or {})
    _check_fields(changes, RESUBMIT_FIELDS, "a resubmission")
    now = now or timezone.now()
    old = _locked(user, workload)
    if old.state not in TERMINAL_STATES:
        raise ValidationError({"state": [
            f"workload {old.name} is {old.state}: only an ended (finished, failed, cancelled "
            "or rejected) workload can be resubmitted; change a pending one with PATCH, or "
            "cancel it first"]})
    previous = workload_input(old)
    data = {**previous, **changes}
    update = (extensions.submission_update(replaces=old.pk, previous=previous)
              if old.state in GRANDFATHERED_STATES else contextlib.nullcontext())
    with update:
        new = workload_submit(user=user, data=data, now=now)
    who = user.get_username()
    changed = _changed(changes, previous)
    what = f" with {', '.join(changed)} changed" if changed else ""
    WorkloadEvent.objects.bulk_create([
        WorkloadEvent(workload=new, at=now, type=EventType.RESUBMITTED, actor=user,
                      code=EventCode.RESUBMITTED,
                      message=f"resubmission of #{old.pk} ({old.state}) by {who}{what}",
                      payload={"replaces": old.pk, "changed": changed}),
        WorkloadEvent(workload=old, at=now, type=EventType.RESUBMITTED, actor=user,
                      code=EventCode.RESUBMITTED,
                      message=f"resubmitted as #{new.pk} by {who}{what}",
                      payload={"replaced_by": new.pk, "changed": changed}),
    ])
    return new


@dataclass
class UpdateOutcome:
    """What `workload_update` did: the workload (changed, or as it was when refused)."""

    workload: Workload
    refused: list[tuple[str, str]] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def _keep_one_group(w: Workload, clean: Mapping[str, Any]) -> None:
    """A workload that is one group of a kind of independent gangs (a LeaderWorkerSet's)
    stays one group: more groups are another submission."""
    if LABEL_GANG_OF not in (w.labels or {}) or not clean["kind"]:
        return
    if len(gang_manifests(clean["kind"], clean["manifest"], clean["pods"])) > 1:
        raise ValidationError({"manifest.spec.replicas": [
            f"{w.name} is one group of {w.labels[LABEL_GANG_OF]}: its replicas stay 1; "
            "submit more groups as another LeaderWorkerSet"]})


@transaction.atomic
def workload_update(
    *, user: Any, workload: Workload, changes: Mapping[str, Any], now: datetime | None = None,
) -> UpdateOutcome:
    """Change a pending workload's request in place (same id, same submission time).

    Validated like a submission (ValidationError naming every bad field, nothing saved), then
    judged by the submission checks as an update of the workload (a change that does not grow
    is not denied by a newly tightened rule) and by the engine's request check. A refused
    change leaves the workload as it was: the reasons are returned, and recorded as a policy
    event with the violations. Runs under the scheduling lock, so no cycle admits the old
    request meanwhile.
    """
    _check_fields(changes, UPDATE_FIELDS, "an update")
    if (workload.state == S.RUNNING and scaling.scalable(workload.kind)
            and set(changes) == {"manifest"}):
        # A running Deployment or StatefulSet scales: its added pods are a new admission.
        if not user_may_manage(user, workload):
            raise PermissionDenied("only the owner, a lead of its team or an admin may scale "
                                   f"workload {workload.name}")
        w = scaling.workload_scale(user=user, workload=workload, manifest=changes["manifest"],
                                   now=now)
        return UpdateOutcome(
            Workload.objects.select_related("queue", "team", "owner", "priority_class")
            .prefetch_related("pod_sets").get(pk=w.pk), [], ["manifest"])
    with scheduling_lock(wait=True):
        now = now or timezone.now()  # read once the lock is held: after what a cycle wrote
        w = _locked(user, workload)
        if w.state != S.PENDING:
            raise ValidationError({"state": [
                f"workload {w.name} is {w.state}: only a pending workload can be changed; "
                "resubmit it (POST .../resubmit) once it has ended"]})
        previous = workload_input(w)
        data = {**previous, **changes}
        lookups = SubmitLookups(user)
        clean = _validate(user, data, lookups)
        _keep_one_group(w, clean)
        changed = _changed(changes, previous)
        if not changed:
            return UpdateOutcome(w)
        verdict = extensions.run_submission_checks(extensions.SubmissionContext(
            user=user, queue=w.queue, team=w.team, request=data, is_update=True,
            replaces=w.pk, previous=previous))
        priority_class = policy_priority_class(verdict, clean["priority_class"],
                                                        lookups.classes)
        for name in ("name", "preemptible", "checkpoint", "strategy", "dataset", "image",
                     "command", "duration_hint_s", "termination_grace_s", "topology", "labels",
                     "kind", "manifest", "interactive", "idle_timeout_s", "time_limit_s"):
            setattr(w, name, clean[name])
        w.priority_class = priority_class
        pod_sets = [
            PodSet(workload=w, index=p["index"], count=p["count"], flavors=p["flavors"],
                   gpus=p["gpus"], cpu=p["cpu"], memory_gib=p["memory_gib"],
                   gpu_memory_gib=p["gpu_memory_gib"], resources=p["resources"])
            for p in clean["pods"]
        ]
        refused = list(verdict.deny) or RequestChecker(now).check(w, pod_sets)
        who = user.get_username()
        events = [WorkloadEvent(workload=w, at=now, type=EventType.POLICY, actor=user,
                                message=line) for line in verdict.audit]
        if refused:
            events.append(WorkloadEvent(
                workload=w, at=now, type=EventType.POLICY, actor=user, code=refused[0][0],
                message=f"update by {who} refused ({', '.join(changed)}): "
                        + "; ".join(m for _, m in refused),
                payload={"changed": changed, "reasons": [list(r) for r in refused]}))
            WorkloadEvent.objects.bulk_create(events)
            return UpdateOutcome(
                Workload.objects.select_related("queue", "team", "owner", "priority_class")
                .prefetch_related("pod_sets").get(pk=w.pk), refused, changed)
        # Above the approval thresholds it waits for approval again only if it asks for more
        # than was approved (an approved workload keeps its approval for a smaller change).
        old_gpus = sum(p.count * p.gpus for p in w.pod_sets.all())
        new_gpus = sum(p.count * p.gpus for p in pod_sets)
        bigger = new_gpus > old_gpus or (clean["duration_hint_s"] or 0) > (
            previous["duration_hint_s"] or 0)
        held = approval_reason(clean) if (bigger or w.needs_approval) else ""
        fields = ["name", "preemptible", "checkpoint", "strategy", "dataset", "image", "command",
                  "duration_hint_s", "termination_grace_s", "topology", "labels", "kind",
                  "manifest", "interactive", "idle_timeout_s", "time_limit_s",
                  "priority_class", "needs_approval", "reason_code", "reason_message"]
        if held:
            w.needs_approval = True
            w.reason_code, w.reason_message = EventCode.NEEDS_APPROVAL, held
        elif w.needs_approval:
            w.needs_approval = False
            w.reason_code, w.reason_message = "", ""
        w.save(update_fields=fields)
        PodSet.objects.filter(workload=w).delete()  # clears its gpus_total (a trigger)
        PodSet.objects.bulk_create(pod_sets)
        Workload.objects.filter(pk=w.pk).update(gpus_total=new_gpus)
        w.gpus_total = new_gpus
        gpus = gpus_shown(sum(p.count * p.gpus for p in pod_sets))
        events.insert(0, WorkloadEvent(
            workload=w, at=now, type=EventType.UPDATED, actor=user, code=EventCode.UPDATED,
            message=f"updated by {who} ({', '.join(changed)}): {gpus} GPUs in "
                    f"{sum(p.count for p in pod_sets)} pods",
            payload={"changed": changed, "priority_class": priority_class.name}))
        if held:
            events.append(WorkloadEvent(workload=w, at=now, type=EventType.POLICY, actor=user,
                                        code=EventCode.NEEDS_APPROVAL, message=held))
        WorkloadEvent.objects.bulk_create(events)
    if not w.needs_approval:
        transaction.on_commit(enqueue.cycle_nudge)
    return UpdateOutcome(
        Workload.objects.select_related("queue", "team", "owner", "priority_class")
        .prefetch_related("pod_sets").get(pk=w.pk), [], changed)
