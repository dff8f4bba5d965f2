"""A month of history for the demo (`manage.py seed_demo --history 30d`).

The demo organisation starts with empty charts: nothing has run yet. This module gives it a
past. It draws the work each team typically submits (arrivals by hour of day and day of
week, job sizes, run times, priorities and a few cancels: fixed seed, the same every time),
replays it through the scheduling engine on the demo's own tree and fleet (the scenario
runner: admissions, borrowing, reclaims, preemptions and waits are the engine's decisions),
writes what happened as workloads, events and closed admissions dated in the past, then runs
the billing pipeline over every past hour with synthetic DCGM telemetry (each job its own
efficiency): usage records, charges in the ledger, budgets' thresholds, a reconciliation per
day and the invoices of the months that ended.

History ends where the live demo begins: work the replay still had running at that moment is
left out (the live demo's own workloads start then). Every history workload carries the label
`allot.io/demo-history: "true"`; seeding again adds nothing once one exists.
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from billing.metering import WorkloadTelemetry, hour_floor
from billing.models import CostCenter
from billing.prometheus import ENGINE_ACTIVE
from billing.services.budgets import budgets_evaluate
from billing.services.invoices import invoice_issue
from billing.services.reconciliation import reconciliation_run
from billing.services.usage import charges_post_hour, usage_rollup_hour
from quotas.models import Flavor, Queue, Team, TeamMembership
from scheduling.models import (
    Admission,
    Cluster,
    EndReason,
    EventType,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.replay.loader import load_scenario
from scheduling.replay.runner import run_scenario

LABEL = "allot.io/demo-history"
SEED = 20261101
# The longest run time drawn, and how long before "now" the last job may arrive.
MAX_RUN_H = 20.0
LAST_ARRIVAL_H = 1.0
DURATION = re.compile(r"^(\d+)\s*([dh])$")


@dataclass(frozen=True)
class Demand:
    """What a leaf queue typically submits."""

    per_day: float  # arrivals on an average weekday
    flavors: tuple[tuple[str, float], ...]  # flavor, weight
    sizes: tuple[tuple[int, int, float], ...]  # pods, GPUs per pod, weight
    median_h: float  # median run time (log-normal, sigma 0.9)
    classes: tuple[tuple[str, float], ...]  # priority class, weight
    night: bool = False  # arrives mostly at night (nightly batch)


A, H, V = "a100-80g", "h100-80g", "v100-32g"
DEMAND: dict[str, Demand] = {
    "research/vision/detection": Demand(
        22, ((A, 0.75), (V, 0.25)), ((1, 1, 3), (1, 2, 3), (1, 4, 3), (1, 8, 2), (2, 8, 0.5)),
        2.5, (("training", 0.8), ("batch-low", 0.2))),
    "research/vision/segmentation": Demand(
        20, ((A, 0.7), (V, 0.3)), ((1, 1, 2), (1, 4, 3), (1, 8, 2)), 2.0,
        (("training", 0.7), ("batch-low", 0.3))),
    "research/nlp/llm": Demand(
        5, ((H, 0.85), (A, 0.15)), ((1, 4, 2), (1, 8, 4), (2, 8, 2), (4, 8, 0.5)), 4.0,
        (("training", 1.0),)),
    "research/nlp/speech": Demand(
        16, ((H, 0.6), (A, 0.4)), ((1, 1, 2), (1, 2, 2), (1, 4, 3), (1, 8, 1)), 3.0,
        (("training", 0.8), ("batch-low", 0.2))),
    "research/robotics": Demand(
        22, ((A, 1.0),), ((1, 1, 3), (1, 2, 3), (1, 4, 2), (1, 8, 1)), 2.0,
        (("training", 0.6), ("batch-low", 0.4))),
    "product/search": Demand(
        5, ((A, 0.5), (H, 0.5)), ((1, 1, 2), (1, 2, 2), (1, 4, 1)), 8.0,
        (("inference-high", 1.0),)),
    "product/recsys": Demand(
        22, ((A, 0.6), (V, 0.4)), ((1, 2, 2), (1, 4, 3), (1, 8, 2)), 2.0,
        (("training", 1.0),), night=True),
}
# Relative arrival rate by hour of day (UTC), weekday and weekend.
DAY_SHAPE = [0.3, 0.25, 0.2, 0.2, 0.25, 0.35, 0.6, 0.9, 1.3, 1.6, 1.7, 1.6,
             1.4, 1.6, 1.8, 1.8, 1.6, 1.4, 1.1, 0.9, 0.7, 0.6, 0.5, 0.4]
NIGHT_SHAPE = [2.2, 2.4, 2.4, 2.0, 1.5, 1.0, 0.6, 0.4, 0.4, 0.5, 0.6, 0.6,
               0.6, 0.6, 0.6, 0.6, 0.6, 0.7, 0.8, 1.0, 1.3, 1.6, 1.9, 2.1]
WEEKEND = 0.35


class HistoryError(ValueError):
    """A --history value that is not a duration such as 30d or 72h."""


def parse_span(text: str) -> timedelta:
    """`30d` or `72h` as a timedelta, between 1 hour and 90 days."""
    match = DURATION.match(text.strip())
    if not match:
        raise HistoryError(f"--history {text!r}: expected days or hours, such as 30d or 72h")
    amount = int(match[1])
    span = timedelta(days=amount) if match[2] == "d" else timedelta(hours=amount)
    if not timedelta(hours=1) <= span <= timedelta(days=90):
        raise HistoryError(f"--history {text!r}: between 1h and 90d")
    return span


def _pick(rng: random.Random, weighted: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    total = sum(item[-1] for item in weighted)
    x = rng.uniform(0, total)
    for item in weighted:
        x -= item[-1]
        if x <= 0:
            return item
    return weighted[-1]


def draw_workloads(start: datetime, span: timedelta, leaves: set[str]) -> list[dict[str, Any]]:
    """The history's submissions as scenario workloads (seconds from `start`), by thinning a
    Poisson process whose rate follows the hour of day and the day of week."""
    rng = random.Random(SEED)
    horizon = span.total_seconds() - LAST_ARRIVAL_H * 3600
    out: list[dict[str, Any]] = []
    for path, d in DEMAND.items():
        if path not in leaves:
            continue
        shape = NIGHT_SHAPE if d.night else DAY_SHAPE
        peak = d.per_day / 24 * max(shape) / 3600  # arrivals per second at the peak
        t, n = 0.0, 0
        while True:
            t += rng.expovariate(peak)
            if t >= horizon:
                break
            at = start + timedelta(seconds=t)
            rate = shape[at.hour] * (WEEKEND if at.weekday() >= 5 else 1.0)
            if rng.random() > rate / max(shape):
                continue
            n += 1
            flavor = _pick(rng, d.flavors)[0]
            pods, gpus, _ = _pick(rng, d.sizes)
            klass = _pick(rng, d.classes)[0]
            run_h = min(MAX_RUN_H, max(0.1, rng.lognormvariate(math.log(d.median_h), 0.9)))
            leaf = path.rsplit("/", 1)[-1]
            w: dict[str, Any] = {
                "name": f"{leaf}-{n:04d}", "queue": leaf, "x-path": path, "submit_at": round(t, 3),
                "duration_s": round(run_h * 3600), "priority_class": klass,
                "checkpoint": klass != "inference-high" and rng.random() < 0.8,
                "termination_grace_s": 30,
                "pods": [{"count": pods, "flavors": [flavor], "gpus": gpus,
                          "cpu": 8 * gpus, "memory_gib": 64 * gpus}],
            }
            if rng.random() < 0.04:
                w["cancel_at"] = round(t + rng.uniform(600, 4 * 3600), 3)
            out.append(w)
    out.sort(key=lambda w: (w["submit_at"], w["name"]))
    return out


def _scenario(workloads: list[dict[str, Any]], until_s: float) -> dict[str, Any]:
    """The demo's tree and fleet (as the database holds them) with the drawn workloads."""
    queues = list(Queue.objects.prefetch_related("quotas__flavor").order_by("path"))
    by_parent: dict[int | None, list[Queue]] = defaultdict(list)
    for q in queues:
        by_parent[q.parent_id].append(q)

    def node(q: Queue) -> dict[str, Any]:
        quota: dict[str, dict[str, dict[str, float]]] = {}
        for e in q.quotas.all():
            vals = {"min": float(e.min)}
            if e.max is not None:
                vals["max"] = float(e.max)
            if e.lendable is not None:
                vals["lendable"] = float(e.lendable)
            quota.setdefault(e.flavor.name, {})[e.resource] = vals
        out: dict[str, Any] = {"name": q.name, "quota": quota}
        if q.strategy:
            out["strategy"] = q.strategy
        children = by_parent.get(q.pk, [])
        if children:
            out["children"] = [node(c) for c in children]
        return out

    clusters = []
    for c in Cluster.objects.prefetch_related("nodes__flavor").order_by("name"):
        nodes = [{"count": 1, "flavor": n.flavor.name, "gpus": n.gpus, "cpu": float(n.cpu),
                  "memory_gib": float(n.memory_gib), "rack": n.rack}
                 for n in sorted(c.nodes.all(), key=lambda n: n.name)]
        clusters.append({"name": c.name, "price": float(c.price), "nodes": nodes})
    flavors = [{"name": f.name, **({"gpu_memory_gib": f.gpu_memory_gib}
                                   if f.gpu_memory_gib else {})}
               for f in Flavor.objects.order_by("name")]
    classes = [{"name": p.name, "value": p.value, "can_preempt": p.can_preempt}
               for p in PriorityClass.objects.order_by("name")]
    return {"name": "demo-history", "until": until_s, "flavors": flavors,
            "clusters": clusters, "queues": [node(q) for q in by_parent[None]],
            "priority_classes": classes, "workloads": workloads}


def _submitters() -> dict[str, tuple[Any, Any]]:
    """Leaf path -> (a submitter, the team): the team granted that leaf (or an ancestor of
    it), one of its members, else a platform admin."""
    admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    out: dict[str, tuple[Any, Any]] = {}
    teams = list(Team.objects.prefetch_related("queues").order_by("name"))
    for path in DEMAND:
        team = next((t for t in teams for q in t.queues.all()
                     if path == q.path or path.startswith(q.path + "/")), None)
        member = TeamMembership.objects.filter(team=team).select_related("user").order_by(
            "pk").first() if team is not None else None
        out[path] = (member.user if member else admin, team)
    return out


def seed_history(span: timedelta, *, now: datetime | None = None) -> list[str]:
    """Replay `span` of demo work before `now` into the database and bill it (idempotent)."""
    if Workload.objects.filter(labels__has_key=LABEL).exists():
        return ["  history: already seeded"]
    now = now or timezone.now()
    start = hour_floor(now - span)
    span_s = (now - start).total_seconds()
    leaves = set(Queue.objects.filter(children__isnull=True).values_list("path", flat=True))
    drawn = draw_workloads(start, now - start, leaves)
    if not drawn:
        return ["  history: no demo leaf queue to replay"]
    # Run on past the end, so what was still running at `now` can be told apart and left out.
    out = run_scenario(load_scenario(_scenario(drawn, span_s + (MAX_RUN_H + 2) * 3600)))
    kept = _write(drawn, out["workloads"], start, span_s)
    # The demo's fleet was there all along: idle capacity counts from the history's start.
    Cluster.objects.filter(created_at__gt=start).update(created_at=start)
    billed = _bill(start, now)
    return [f"  history: {kept} workloads over {span.days}d {span.seconds // 3600}h replayed "
            f"through the engine (allocation {out['metrics']['gpu_allocation_rate']:.0%}, "
            f"{out['metrics']['preemptions']} preemptions), {billed}"]


def _ended(rec: dict[str, Any], spec: dict[str, Any]) -> float | None:
    if rec["finished_at"] is not None:
        return float(rec["finished_at"])
    if rec["state"] == "cancelled":
        return float(spec.get("cancel_at", spec["submit_at"]))
    return None


@transaction.atomic
def _write(drawn: list[dict[str, Any]], result: dict[str, Any], start: datetime,
           span_s: float) -> int:
    """Workloads, pod sets, events and admissions of what ended before `now`."""
    at = lambda s: start + timedelta(seconds=float(s))  # noqa: E731
    queues = {q.path: q for q in Queue.objects.all()}
    classes = {p.name: p for p in PriorityClass.objects.all()}
    clusters = {c.name: c for c in Cluster.objects.all()}
    flavors = {f.name: f for f in Flavor.objects.all()}
    submitters = _submitters()
    rows: list[tuple[Workload, dict[str, Any], dict[str, Any]]] = []
    for spec in drawn:
        rec = result[spec["name"]]
        end = _ended(rec, spec)
        if end is None or end > span_s:
            continue  # still running (or waiting) when the live demo begins
        user, team = submitters[spec["x-path"]]
        state = WorkloadState.FINISHED if rec["state"] == "finished" else \
            WorkloadState.CANCELLED
        w = Workload(
            name=spec["name"], queue=queues[spec["x-path"]], team=team, owner=user,
            state=state, priority_class=classes.get(spec["priority_class"]),
            preemptible=True, checkpoint=spec["checkpoint"],
            image="registry.local/train:demo", command=["python", "train.py"],
            duration_hint_s=spec["duration_s"], termination_grace_s=30,
            labels={LABEL: "true"}, submitted_at=at(spec["submit_at"]),
            finished_at=at(end), state_changed_at=at(end),
        )
        rows.append((w, spec, rec))
    Workload.objects.bulk_create([w for w, _, _ in rows], batch_size=500)
    pod_sets, events, admissions = [], [], []
    for w, spec, rec in rows:
        pod = spec["pods"][0]
        pod_sets.append(PodSet(workload=w, index=0, count=pod["count"], flavors=pod["flavors"],
                               gpus=pod["gpus"], cpu=Decimal(pod["cpu"]),
                               memory_gib=Decimal(pod["memory_gib"])))
        events.append(WorkloadEvent(workload=w, at=w.submitted_at, type=EventType.SUBMITTED,
                                    actor=w.owner, message="submitted (demo history)"))
        for r in rec["reasons"]:
            events.append(WorkloadEvent(workload=w, at=at(r["at"]), type=EventType.REASON,
                                        code=r["code"], message=r["message"]))
        pres = list(rec["preemptions"])
        for i, adm in enumerate(rec["admissions"]):
            reserved = at(adm["at"])
            running = reserved + timedelta(seconds=min(20, 1 + i))
            pre = next((p for p in pres if p["at"] >= adm["at"]), None)
            finished = w.finished_at or reserved
            if pre is not None:
                pres.remove(pre)
                ended, why = at(pre["at"]) + timedelta(seconds=30), EndReason.PREEMPTED
            else:
                ended = finished
                why = EndReason.FINISHED if w.state == WorkloadState.FINISHED else \
                    EndReason.CANCELLED
            ended = max(ended, running)
            gpus = pod["count"] * pod["gpus"]
            admissions.append(Admission(
                workload=w, cluster=clusters[adm["cluster"]], flavor=flavors[adm["flavor"]],
                nodes=adm["nodes"], borrowed=adm["borrowed"], gpus=gpus,
                cpu=Decimal(pod["count"] * pod["cpu"]),
                memory_gib=Decimal(pod["count"] * pod["memory_gib"]), reserved_at=reserved,
                dispatched_at=reserved, running_at=running, ended_at=ended, end_reason=why,
                cleaned_at=ended))
            events.append(WorkloadEvent(
                workload=w, at=reserved, type=EventType.ADMITTED,
                message=f"admitted on {adm['cluster']} ({adm['flavor']}, {len(adm['nodes'])} "
                f"pods{', borrowed' if adm['borrowed'] else ''}): reserving",
                payload={"cluster": adm["cluster"], "flavor": adm["flavor"],
                         "borrowed": adm["borrowed"], "nodes": adm["nodes"]}))
            events.append(WorkloadEvent(workload=w, at=running, type=EventType.RUNNING,
                                        message="pods running"))
            if pre is not None:
                events.append(WorkloadEvent(
                    workload=w, at=at(pre["at"]), type=EventType.PREEMPTED,
                    message=f"preempted ({pre['kind']}) for {pre['by']}",
                    payload={"kind": pre["kind"], "by_name": pre["by"], "history": True}))
                if finished > ended:  # not cancelled during its grace period
                    events.append(WorkloadEvent(
                        workload=w, at=ended, type=EventType.REQUEUED,
                        message="grace period over: back in the queue"))
        final = EventType.FINISHED if w.state == WorkloadState.FINISHED else \
            EventType.CANCELLED
        events.append(WorkloadEvent(workload=w, at=w.finished_at or w.submitted_at, type=final,
                                    message="finished" if final == EventType.FINISHED else
                                    "cancelled by its owner"))
    PodSet.objects.bulk_create(pod_sets, batch_size=1000)
    Admission.objects.bulk_create(admissions, batch_size=1000)
    WorkloadEvent.objects.bulk_create(events, batch_size=1000)
    return len(rows)


def _telemetry(hour: datetime, spans: list[tuple[int, datetime, datetime, float, float]]
               ) -> dict[int, WorkloadTelemetry]:
    """Synthetic DCGM engine activity per minute for the admissions running in `hour`:
    each job at its own efficiency, with some noise, sum over its GPUs."""
    out: dict[int, WorkloadTelemetry] = {}
    end = hour + timedelta(hours=1)
    for wid, begin, finish, gpus, eff in spans:
        if finish <= hour or begin >= end:
            continue
        tel = out.setdefault(wid, WorkloadTelemetry(source=ENGINE_ACTIVE))
        rng = random.Random(wid * 100003 + int(hour.timestamp()) // 3600)
        minute = max(hour, begin).replace(second=0, microsecond=0)
        while minute < min(end, finish):
            minute += timedelta(minutes=1)
            value = max(0.0, min(1.0, eff + rng.gauss(0, 0.08))) * gpus
            tel.active[int(minute.timestamp())] = Decimal(f"{value:.3f}")
            tel.fb_mib[int(minute.timestamp())] = Decimal(int(gpus * 81920 * min(1.0, eff
                                                                                + 0.15)))
    return out


@transaction.atomic
def _bill(start: datetime, now: datetime) -> str:
    """Meter and price every past hour, evaluate the budgets, reconcile each day and issue
    the invoices of the months that ended."""
    rng = random.Random(SEED + 1)
    spans: list[tuple[int, datetime, datetime, float, float]] = []
    for wid, running, ended, gpus in Admission.objects.filter(
            workload__labels__has_key=LABEL).values_list(
            "workload_id", "running_at", "ended_at", "gpus"):
        if running is not None and ended is not None:
            spans.append((wid, running, ended, float(gpus), rng.uniform(0.35, 0.95)))
    hour, last = start, hour_floor(now) - timedelta(hours=1)
    hours = 0
    while hour <= last:
        usage_rollup_hour(hour=hour, now=now, telemetry=_telemetry(hour, spans))
        charges_post_hour(hour=hour, now=now)
        hour += timedelta(hours=1)
        hours += 1
    budgets_evaluate(now=now)
    days = 0
    day = start.date()
    while day < now.date():
        reconciliation_run(day=day, now=now)
        day += timedelta(days=1)
        days += 1
    invoices = 0
    month = date(start.year, start.month, 1)
    while (month.year, month.month) < (now.year, now.month):
        for cc in CostCenter.objects.order_by("code"):
            invoice_issue(cost_center=cc, month=month, now=now)
            invoices += 1
        month = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return f"{hours} hours billed, {days} days reconciled, {invoices} invoices issued"
