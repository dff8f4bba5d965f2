"""What the request form shows while the user types: can it ever fit, the queue's headroom,
whether it would borrow, and its forecast start (the same forecast as a submitted workload's,
with this request added). Reads only; nothing is saved."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from core.quantity import amounts, display, to_base
from quotas.models import Queue
from quotas.tree_rules import fmt, validate_tree
from scheduling import engine
from scheduling.extensions import estimate_cost
from scheduling.models import Node, PodSet, PriorityClass, Workload
from scheduling.models import WorkloadState as S
from scheduling.request.validation import gpus_shown
from scheduling.workers.eta import request_estimate

ZERO = Decimal(0)


@dataclass
class FlavorVerdict:
    """One acceptable flavor: can the request ever fit on it, and if not, why."""

    flavor: str
    possible: bool
    reasons: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ResourceOffer:
    """An extended resource of a flavor: what its ready nodes advertise and what is free."""

    name: str
    per_node: Decimal  # the most one node advertises
    installed: Decimal  # on every ready node of the flavor
    free: Decimal  # installed less what open admissions' pods hold
    asked: Decimal = ZERO  # by the request, every pod counted

    @property
    def shown(self) -> dict[str, str]:
        return {k: display(self.name, getattr(self, k))
                for k in ("per_node", "installed", "free", "asked")}


@dataclass
class Preview:
    """The live feedback of the request form."""

    gpus: Decimal
    flavors: list[FlavorVerdict]
    flavor: str | None = None  # the first flavor that can ever fit
    levels: list[dict[str, Any]] = field(default_factory=list)  # queue and ancestors
    headroom: Decimal | None = None  # GPUs the queue may still take (None: unlimited)
    guaranteed_room: Decimal = ZERO  # GPUs it may take without borrowing
    fleet_free: Decimal = ZERO  # free GPUs of the flavor on ready nodes
    would_borrow: bool = False
    fits_now: bool = False
    pending_ahead: int = 0
    pending_ahead_gpus: Decimal = ZERO
    estimated_start: datetime | None = None  # the forecast, with this request added
    estimate_low: datetime | None = None
    estimate_high: datetime | None = None
    estimate_known: bool = False
    estimate_note: str = ""
    resources: list[ResourceOffer] = field(default_factory=list)  # on `flavor`
    cost: Any = None  # extensions.CostEstimate on `flavor`, once running (None: no rate)
    cost_total: Decimal | None = None  # over the expected duration, when given

    @property
    def impossible(self) -> bool:
        return not any(f.possible for f in self.flavors)


def advertised_resources(flavors: list[str] | None = None) -> dict[str, list[ResourceOffer]]:
    """Per flavor, the extended resources its ready nodes (of enabled clusters) advertise,
    by name: the most on one node, the total, and what open admissions leave free."""
    nodes = Node.objects.filter(ready=True, cluster__enabled=True).exclude(resources={})
    if flavors is not None:
        nodes = nodes.filter(flavor__name__in=flavors)
    per_node: dict[str, dict[str, Decimal]] = {}
    installed: dict[str, dict[str, Decimal]] = {}
    for flavor, resources in nodes.values_list("flavor__name", "resources"):
        for name, amount in amounts(resources).items():
            most = per_node.setdefault(flavor, {})
            most[name] = max(most.get(name, ZERO), amount)
            total = installed.setdefault(flavor, {})
            total[name] = total.get(name, ZERO) + amount
    held: dict[tuple[str, str], Decimal] = {}
    open_sets = (PodSet.objects.filter(workload__admissions__ended_at__isnull=True,
                                       workload__admissions__flavor__name__in=list(installed))
                 .exclude(resources={})
                 .values_list("workload__admissions__flavor__name", "count", "resources"))
    for flavor, count, resources in open_sets:
        for name, amount in amounts(resources).items():
            held[(flavor, name)] = held.get((flavor, name), ZERO) + count * amount
    return {flavor: [ResourceOffer(name=name, per_node=per_node[flavor][name], installed=total,
                                   free=max(ZERO, total - held.get((flavor, name), ZERO)))
                     for name, total in sorted(names.items())]
            for flavor, names in sorted(installed.items())}


def _bases(pod: dict[str, Any]) -> dict[str, int]:
    """A pod set's extended resources as stored (integers of the base unit): the manifest tab
    gives them so; the fields tab gives the API's Kubernetes quantity strings."""
    return {name: value if isinstance(value, int) else to_base(name, value)
            for name, value in (pod.get("resources") or {}).items()}


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def workload_preview(*, queue: Queue, submission: dict[str, Any], now: datetime) -> Preview:
    """Feedback for a submission dict as `workload_submit` takes it (already form-cleaned)."""
    from quotas.selectors import tree_specs
    from scheduling.request.check import request_check
    from scheduling.selectors import fleet_usage, queue_usage

    pods = submission["pods"]
    gpus = sum((int(p["count"]) * Decimal(str(p["gpus"])) for p in pods), ZERO)
    pc = PriorityClass.objects.filter(name=submission.get("priority_class")).first()
    if pc is None:
        pc = PriorityClass(name="training", value=1000)
    draft = Workload(
        name=submission["name"] or "draft", queue=queue, priority_class=pc,
        preemptible=submission["preemptible"], checkpoint=submission["checkpoint"],
        strategy=submission["strategy"], dataset=submission["dataset"],
        termination_grace_s=30, topology=submission["topology"], submitted_at=now,
    )
    verdicts: list[FlavorVerdict] = []
    for flavor in pods[0]["flavors"]:
        sets = [PodSet(index=i, count=p["count"], flavors=[flavor], gpus=p["gpus"],
                       cpu=p["cpu"], memory_gib=p["memory_gib"],
                       gpu_memory_gib=p.get("gpu_memory_gib"),
                       resources=_bases(p))
                for i, p in enumerate(pods)]
        reasons = request_check(draft, sets, now=now)
        verdicts.append(FlavorVerdict(flavor=flavor, possible=not reasons, reasons=reasons))
    preview = Preview(gpus=gpus, flavors=verdicts)
    possible = [v.flavor for v in verdicts if v.possible]
    if not possible:
        return preview
    flavor = preview.flavor = possible[0]
    key = (flavor, "gpu")
    asked: dict[str, Decimal] = {}
    for p in pods:
        for name, amount in amounts(_bases(p)).items():
            asked[name] = asked.get(name, ZERO) + int(p["count"]) * amount
    preview.resources = [
        ResourceOffer(name=o.name, per_node=o.per_node, installed=o.installed, free=o.free,
                      asked=asked.get(o.name, ZERO))
        for o in advertised_resources([flavor]).get(flavor, [])]
    preview.cost = estimate_cost(flavor, [{**p, "resources": _bases(p)} for p in pods], now)
    hint = submission.get("duration_hint_s")
    if preview.cost is not None and hint:
        preview.cost_total = (preview.cost.per_hour * Decimal(hint) / 3600).quantize(
            Decimal("0.01"))

    report = validate_tree(tree_specs().values())
    usage = queue_usage()
    headroom: Decimal | None = None
    guaranteed: Decimal | None = None
    for path in _ancestors(queue.path):
        res = report.resolved.get(path, {}).get(key)
        used = usage.get(path, {}).get(key, {}).get("used", ZERO)
        if res is None:  # the key is not quota-accounted: only nodes limit it
            continue
        qmin, qmax = Decimal(res.min), None if res.max is None else Decimal(res.max)
        preview.levels.append({"path": path, "min": qmin, "max": qmax, "used": used})
        if qmax is not None:
            room = max(ZERO, qmax - used)
            headroom = room if headroom is None else min(headroom, room)
        g = max(ZERO, qmin - used)
        guaranteed = g if guaranteed is None else min(guaranteed, g)
    preview.headroom = headroom
    preview.guaranteed_room = guaranteed if guaranteed is not None else Decimal(gpus)

    capacity = Decimal(sum(
        Node.objects.filter(flavor__name=flavor, ready=True, cluster__enabled=True)
        .values_list("gpus", flat=True), 0
    ))
    used_fleet = sum((u["gpu"] for (c, f), u in fleet_usage().items() if f == flavor), ZERO)
    preview.fleet_free = max(ZERO, capacity - used_fleet)
    preview.would_borrow = gpus > preview.guaranteed_room

    ahead = Workload.objects.filter(queue=queue, state=S.PENDING,
                                    priority_class__value__gte=pc.value)
    preview.pending_ahead = ahead.count()
    preview.pending_ahead_gpus = sum(
        (ps["count"] * ps["gpus"]
         for ps in PodSet.objects.filter(workload__in=ahead).values("count", "gpus")), ZERO)
    blocked_by_guarantee = preview.would_borrow and not submission["preemptible"]
    if blocked_by_guarantee:
        preview.estimate_note = (
            f"not preemptible: it waits until {gpus_shown(gpus)} GPUs fit within the guaranteed "
            f"{fmt(preview.guaranteed_room)} left (or mark it preemptible to borrow). "
        )
    # The forecast the workload page shows once it is submitted, with this request added;
    # above `preview_max_pending` waiting workloads it is left to the background forecast
    # (the form's answer must come in well under a second or two).
    waiting = Workload.objects.filter(state=S.PENDING, needs_approval=False).count()
    if waiting > int(settings.ALLOT_ETA["preview_max_pending"]):
        preview.estimate_note += (
            f"{waiting} workloads wait in the fleet: the start is forecast in the background "
            "after you submit (the workload page shows it within a minute).")
        return preview
    est = request_estimate(spec=_draft_spec(submission, queue.path, pc, pods, now),
                           hint_s=submission.get("duration_hint_s"), now=now)
    preview.estimated_start, preview.estimate_low, preview.estimate_high = (
        est.start, est.low, est.high)
    preview.estimate_known = True
    preview.fits_now = est.start is not None and est.start <= now
    preview.estimate_note += est.assumes
    return preview


def _draft_spec(submission: dict[str, Any], path: str, pc: PriorityClass,
                pods: list[dict[str, Any]], now: datetime) -> engine.WorkloadSpec:
    """The request as the engine would take it once submitted (named `draft`)."""
    return engine.WorkloadSpec(
        name="draft", queue=path, submitted_at=now.timestamp(), priority=pc.value,
        priority_class=pc.name, can_preempt=pc.can_preempt,
        preemptible=bool(submission["preemptible"]), checkpoint=bool(submission["checkpoint"]),
        strategy=submission["strategy"] or "", dataset=submission["dataset"] or "",
        topology_same=str((submission["topology"] or {}).get("same", "")),
        pod_sets=tuple(engine.PodSetSpec(
            count=int(p["count"]), flavors=tuple(p["flavors"]),
            gpus=float(p["gpus"]) if 0 < p["gpus"] < 1 else int(p["gpus"]),
            cpu=float(p["cpu"] or 0), memory_gib=float(p["memory_gib"] or 0),
            gpu_memory_gib=p.get("gpu_memory_gib"),
            resources=engine.resources_of(amounts(_bases(p))))
            for p in pods))
