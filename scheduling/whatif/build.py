"""The live state as a scenario (SCENARIO-FORMAT.md), and a what-if's changes applied to it.

`live_scenario` writes what the database holds now as a scenario of the next `hours`:
- the flavors, the enabled clusters with their ready nodes, the priority classes, the quota
  tree with its strategies, the engine settings;
- the admitted work (reserved, running, in grace) submitted at 0, so it is placed again at the
  start, running for what is left of it: its duration hint minus what it has run, else the
  median of its queue's finished runs longer than it has run so far (as the start forecast,
  scheduling/engine/forecast.py);
- the pending work (not held for approval) submitted at 1 s, for its hint or its queue's median
  run time;
- with `repeat_past`, the submissions of the last `hours` again, shifted by `hours`, each for
  the time it really ran (finished), else as pending work: the future's demand taken to be the
  past's.
The waits measured are from these submission times (what a pending workload already waited is
not counted).

`apply_changes` edits a copy: quotas, nodes added, nodes or clusters drained, strategies, and
the effects of policy changes (`policy_effects`, worked out from the database when the what-if
starts by `policy_effects`: submissions denied, priority classes set, queue maxima capped).
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from quotas.models import Flavor, Queue, QuotaEntry
from scheduling.models import (
    ACTIVE_STATES,
    Admission,
    Cluster,
    Node,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadState,
)
from scheduling.replay.checker import STRATEGIES
from scheduling.workers.eta import runtimes_read
from scheduling.workers.snapshot import engine_settings

MAX_HOURS = 168
QUOTA_FIELDS = ("min", "max", "lendable")


class WhatIfError(Exception):
    """A change that cannot be made: `problems` maps a field to its messages."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in problems.items()))
        self.problems = problems


def _num(value: Decimal | float | None) -> float | int | None:
    if value is None:
        return None
    f = float(value)
    return int(f) if f.is_integer() else f


def _pods(sets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for ps in sets:
        pod: dict[str, Any] = {"count": ps["count"], "flavors": list(ps["flavors"]),
                               "gpus": _num(ps["gpus"]), "cpu": _num(ps["cpu"]),
                               "memory_gib": _num(ps["memory_gib"])}
        if ps["gpu_memory_gib"] is not None:
            pod["gpu_memory_gib"] = ps["gpu_memory_gib"]
        out.append(pod)
    return out


def _tree() -> list[dict[str, Any]]:
    """The quota tree as the scenario's nested `queues`."""
    queues = list(Queue.objects.order_by("depth", "path").values(
        "id", "name", "parent_id", "strategy"))
    quota: dict[int, dict[str, dict[str, dict[str, Any]]]] = defaultdict(dict)
    for e in QuotaEntry.objects.values("queue_id", "flavor__name", "resource", "min", "max",
                                       "lendable"):
        vals = {"min": _num(e["min"])}
        if e["max"] is not None:
            vals["max"] = _num(e["max"])
        if e["lendable"] is not None:
            vals["lendable"] = _num(e["lendable"])
        quota[e["queue_id"]].setdefault(e["flavor__name"], {})[e["resource"]] = vals
    nodes: dict[int, dict[str, Any]] = {}
    top: list[dict[str, Any]] = []
    for q in queues:
        node: dict[str, Any] = {"name": q["name"]}
        if q["id"] in quota:
            node["quota"] = quota[q["id"]]
        if q["strategy"]:
            node["strategy"] = q["strategy"]
        nodes[q["id"]] = node
        if q["parent_id"] is None:
            top.append(node)
        else:
            nodes[q["parent_id"]].setdefault("children", []).append(node)
    return top


def _fleet() -> list[dict[str, Any]]:
    clusters = []
    for c in Cluster.objects.filter(enabled=True).order_by("name"):
        lines: dict[tuple[str, int, float, float, str], int] = defaultdict(int)
        for n in Node.objects.filter(cluster=c, ready=True).values(
                "flavor__name", "gpus", "cpu", "memory_gib", "rack"):
            lines[(n["flavor__name"], n["gpus"], float(n["cpu"]), float(n["memory_gib"]),
                   n["rack"])] += 1
        clusters.append({
            "name": c.name, "region": c.region, "price": _num(c.price),
            "health": float(c.health),
            "nodes": [{"count": k, "flavor": f, "gpus": g, "cpu": _num(cpu),
                       "memory_gib": _num(mem), **({"rack": rack} if rack else {})}
                      for (f, g, cpu, mem, rack), k in sorted(lines.items())]})
    return clusters


def live_scenario(*, now: datetime, hours: float, repeat_past: bool = True) -> dict[str, Any]:
    """The scenario of the next `hours` from the live state (module docstring)."""
    runtimes = runtimes_read(now)
    leaves = set(Queue.objects.filter(children__isnull=True).values_list("path", flat=True))
    rows: list[dict[str, Any]] = list(Workload.objects.filter(  # type: ignore[arg-type]
        state__in=[WorkloadState.PENDING, *ACTIVE_STATES], needs_approval=False,
        queue__path__in=leaves).values(
        "id", "name", "state", "queue__name", "queue__path", "priority_class__name",
        "preemptible", "checkpoint", "termination_grace_s", "duration_hint_s", "progress_s",
        "submitted_at"))
    since = now - timedelta(hours=hours)
    past: list[dict[str, Any]] = list(Workload.objects.filter(  # type: ignore[arg-type]
        submitted_at__gte=since, submitted_at__lt=now, needs_approval=False,
        queue__path__in=leaves).values(
        "id", "name", "state", "queue__name", "queue__path", "priority_class__name",
        "preemptible", "checkpoint", "termination_grace_s", "duration_hint_s", "progress_s",
        "submitted_at")) if repeat_past else []
    ids = [r["id"] for r in rows] + [r["id"] for r in past]
    sets: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for ps in PodSet.objects.filter(workload_id__in=ids).order_by("workload_id", "index").values(
            "workload_id", "count", "flavors", "gpus", "cpu", "memory_gib", "gpu_memory_gib"):
        sets[ps["workload_id"]].append(dict(ps))
    running_at = dict(Admission.objects.filter(workload_id__in=ids, ended_at__isnull=True)
                      .values_list("workload_id", "running_at"))
    ran = {wid: (end - start).total_seconds() for wid, start, end in Admission.objects.filter(
        workload_id__in=[r["id"] for r in past], end_reason="finished",
        running_at__isnull=False).values_list("workload_id", "running_at", "ended_at")
        if start is not None and end is not None}

    def base(r: dict[str, Any], prefix: str, at: float, duration: float) -> dict[str, Any]:
        return {"name": f"{prefix}{r['id']}", "queue": r["queue__name"], "submit_at": at,
                "duration_s": max(1.0, round(duration, 3)),
                "priority_class": r["priority_class__name"], "preemptible": r["preemptible"],
                "checkpoint": r["checkpoint"],
                "termination_grace_s": r["termination_grace_s"], "pods": _pods(sets[r["id"]])}

    def left(r: dict[str, Any]) -> float:
        hint = r["duration_hint_s"]
        started = running_at.get(r["id"])
        elapsed = (now - started).total_seconds() if started else 0.0
        if hint is not None:
            return max(1.0, hint - r["progress_s"] - elapsed)
        return max(1.0, runtimes.remaining(r["queue__path"], elapsed + r["progress_s"], 0.5))

    workloads = []
    for r in rows:
        if not sets[r["id"]]:
            continue
        at = 0.0 if r["state"] in ACTIVE_STATES else 1.0
        workloads.append(base(r, "w", at, left(r)))
    for r in past:
        if not sets[r["id"]]:
            continue
        at = (r["submitted_at"] - since).total_seconds() + 1.0
        duration = ran.get(r["id"])
        if duration is None:
            hint = r["duration_hint_s"]
            duration = float(hint) if hint else runtimes.total(r["queue__path"], 0.5)
        workloads.append(base(r, "r", at, duration))
    return {
        "name": f"live {now:%Y-%m-%d %H:%M} UTC, next {_num(hours)} h",
        "until": math.ceil(hours * 3600),
        **live_frame(),
        "workloads": workloads,
    }


def live_frame() -> dict[str, Any]:
    """The live state without work: engine settings, flavors, priority classes, the enabled
    clusters' ready nodes and the quota tree (what a trace is replayed on)."""
    s = engine_settings()
    return {
        "settings": {"reclaim_cooldown_s": s.reclaim_cooldown_s, "starvation_s": s.starvation_s,
                     "strategy": s.strategy, "cycle_interval_s": max(s.cycle_interval_s, 10.0),
                     "termination_grace_s": s.termination_grace_s},
        "flavors": [{"name": f["name"], **({"gpu_memory_gib": f["gpu_memory_gib"]}
                                           if f["gpu_memory_gib"] is not None else {})}
                    for f in Flavor.objects.order_by("name").values("name", "gpu_memory_gib")],
        "priority_classes": [{"name": p.name, "value": p.value, "can_preempt": p.can_preempt}
                             for p in PriorityClass.objects.order_by("-value")],
        "clusters": _fleet(),
        "queues": _tree(),
    }


def _queues_by_path(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def walk(items: list[dict[str, Any]], parent: str) -> None:
        for q in items:
            path = f"{parent}/{q['name']}" if parent else q["name"]
            out[path] = q
            walk(q.get("children") or [], path)

    walk(doc["queues"], "")
    return out


def apply_changes(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of the scenario with the changes made; WhatIfError names each bad field.

    `changes`: `quotas` [{queue (path), flavor, resource (gpu), min, max, lendable}] (a value
    left out is unchanged, null clears max or lendable); `add_nodes` [{cluster, flavor, count,
    gpus, cpu, memory_gib}] (a new cluster name adds a cluster); `drain` [{cluster, flavor,
    count}] (flavor and count left out: the whole cluster); `strategy` (the fleet's default)
    and `queue_strategies` [{queue, strategy}]."""
    out = copy.deepcopy(doc)
    problems: dict[str, list[str]] = defaultdict(list)
    queues = _queues_by_path(out)
    flavors = {f["name"] for f in out["flavors"]}
    for i, ch in enumerate(changes.get("quotas") or []):
        where = f"quotas[{i}]"
        q = queues.get(str(ch.get("queue")))
        if q is None:
            problems[f"{where}.queue"].append(f"no queue {ch.get('queue')!r}")
            continue
        flavor = str(ch.get("flavor"))
        if flavor not in flavors:
            problems[f"{where}.flavor"].append(f"no flavor {flavor!r}")
            continue
        resource = str(ch.get("resource") or "gpu")
        vals = q.setdefault("quota", {}).setdefault(flavor, {}).setdefault(resource, {})
        for f in QUOTA_FIELDS:
            if f not in ch:
                continue
            v = ch[f]
            if v is None and f != "min":
                vals.pop(f, None)
            elif isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 \
                    and math.isfinite(v):
                vals[f] = v
            else:
                problems[f"{where}.{f}"].append(f"{v!r} is not a number >= 0")
    clusters = {c["name"]: c for c in out["clusters"]}
    for i, ch in enumerate(changes.get("add_nodes") or []):
        where = f"add_nodes[{i}]"
        flavor = str(ch.get("flavor"))
        if flavor not in flavors:
            problems[f"{where}.flavor"].append(f"no flavor {flavor!r}")
            continue
        count = ch.get("count", 1)
        if not isinstance(count, int) or not 1 <= count <= 1000:
            problems[f"{where}.count"].append(f"{count!r}: a whole number from 1 to 1000")
            continue
        name = str(ch.get("cluster") or "")
        if not name:
            problems[f"{where}.cluster"].append("a cluster name is required")
            continue
        c = clusters.setdefault(name, {"name": name, "nodes": []})
        if c not in out["clusters"]:
            out["clusters"].append(c)
        c["nodes"].append({"count": count, "flavor": flavor, "gpus": int(ch.get("gpus", 8)),
                           "cpu": ch.get("cpu", 96), "memory_gib": ch.get("memory_gib", 1024)})
    for i, ch in enumerate(changes.get("drain") or []):
        where = f"drain[{i}]"
        c = clusters.get(str(ch.get("cluster")))
        if c is None:
            problems[f"{where}.cluster"].append(f"no cluster {ch.get('cluster')!r}")
            continue
        if "flavor" not in ch:
            c["nodes"] = []
            continue
        left = int(ch.get("count", 10**9))
        for line in c["nodes"]:
            if line["flavor"] == ch["flavor"] and left > 0:
                take = min(left, line["count"])
                line["count"] -= take
                left -= take
        c["nodes"] = [n for n in c["nodes"] if n["count"] > 0]
    out["clusters"] = [c for c in out["clusters"] if c["nodes"]]
    if "strategy" in changes:
        if changes["strategy"] not in STRATEGIES:
            problems["strategy"].append(f"{changes['strategy']!r}: one of "
                                        f"{', '.join(sorted(STRATEGIES))}")
        else:
            out["settings"]["strategy"] = changes["strategy"]
    for i, ch in enumerate(changes.get("queue_strategies") or []):
        q = queues.get(str(ch.get("queue")))
        if q is None:
            problems[f"queue_strategies[{i}].queue"].append(f"no queue {ch.get('queue')!r}")
        elif ch.get("strategy", "") not in (*STRATEGIES, ""):
            problems[f"queue_strategies[{i}].strategy"].append(
                f"{ch.get('strategy')!r}: one of {', '.join(sorted(STRATEGIES))}")
        else:
            q["strategy"] = ch.get("strategy", "")
    effects = changes.get("policy_effects")
    if effects:
        _apply_policy_effects(out, queues, effects)
    if problems:
        raise WhatIfError(dict(problems))
    return out


def submissions(doc: dict[str, Any]) -> dict[str, int]:
    """The scenario's workloads a submission policy decides (not admitted yet: the pending
    work and the past's again), by name -> workload id."""
    return {w["name"]: int(w["name"][1:]) for w in doc["workloads"]
            if w["submit_at"] > 0 and w["name"][:1] in ("w", "r") and w["name"][1:].isdigit()}


def limit_keys(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each queue's configured max per "flavor/resource" in the scenario (None: none)."""
    return {path: {f"{flavor}/{res}": vals.get("max") for flavor, by in (q.get("quota") or {})
                   .items() for res, vals in by.items()}
            for path, q in _queues_by_path(doc).items()}


def policy_effects(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any] | None:
    """What the what-if's `policies` do to the scenario `doc` (already changed otherwise):
    from the policies app (`extensions.whatif_policies`); WhatIfError names bad fields."""
    from scheduling import extensions

    items = changes.get("policies")
    if not items:
        return None
    fn = extensions.whatif_policies()
    if fn is None:
        raise WhatIfError({"policies": ["policy changes need the policies app"]})
    try:
        return fn(items, submissions(doc), limit_keys(doc))
    except ValueError as exc:
        problems = getattr(exc, "problems", None)
        raise WhatIfError(problems or {"policies": [str(exc)]}) from exc


def _apply_policy_effects(out: dict[str, Any], queues: dict[str, dict[str, Any]],
                          effects: dict[str, Any]) -> None:
    deny = set(effects.get("deny") or {})
    priority = effects.get("priority") or {}
    out["workloads"] = [w for w in out["workloads"] if w["name"] not in deny]
    for w in out["workloads"]:
        if w["name"] in priority:
            w["priority_class"] = priority[w["name"]]
    for cap in effects.get("caps") or []:
        q = queues.get(cap["queue"])
        if q is None:
            continue
        flavor, _, resource = cap["key"].partition("/")
        vals = q.setdefault("quota", {}).setdefault(flavor, {}).setdefault(resource, {"min": 0})
        if vals.get("max") is None or cap["max"] < vals["max"]:
            vals["max"] = cap["max"]
            vals["min"] = min(vals.get("min", 0), cap["max"])


def changed_queues(changes: dict[str, Any]) -> set[str]:
    """The queue paths a what-if's changes touch (what a lead must be allowed to decide)."""
    return {str(ch.get("queue")) for key in ("quotas", "queue_strategies")
            for ch in changes.get(key) or []}


def fleet_changes(changes: dict[str, Any]) -> list[str]:
    """The changes of the fleet or the whole tree's defaults (admins only)."""
    return [k for k in ("add_nodes", "drain", "strategy", "policies") if changes.get(k)]
