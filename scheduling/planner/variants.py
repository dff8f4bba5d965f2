"""The three scenarios a trace is replayed as: static quotas, the current tree, a proposal.

A CSV trace is put on the live fleet and the live tree (`whatif.build.live_frame`): each
tenant goes to the leaf of its name (a leaf's path or name), the others by rank, the tenant
with the most GPU-hours to the leaf with the largest min on the flavor, the next to the next,
round again when the leaves run out. Each job asks the flavor chosen (default: the one with
the most GPUs), split into whole-node pods (a job of 20 GPUs on 8-GPU nodes: two pods of 8 and
one of 4) with each GPU's share of a node's cores and memory (half of it, so reserved cores
do not stop a full node). A scenario file brings its own fleet and tree.

- `static`: the current tree with every max set to its min (no borrowing, no lending);
- `current`: as it is;
- `proposed`: with the quota changes (the what-if's `quotas` list: queue path, flavor, resource,
  min, max, lendable) and/or a whole proposed tree (a scenario's `queues` list) in its place.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from typing import Any

from scheduling.planner.traces import Job, Trace, TraceError
from scheduling.replay import ScenarioError, load_scenario
from scheduling.whatif.build import WhatIfError, apply_changes

VARIANTS = ("static", "current", "proposed")
MIN_CYCLE_S = 60.0
TAIL_S = 2 * 86_400


def leaves(queues: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(path, node) of every leaf of a scenario's nested `queues`, depth first."""
    out: list[tuple[str, dict[str, Any]]] = []

    def walk(items: list[dict[str, Any]], parent: str) -> None:
        for q in items:
            path = f"{parent}/{q['name']}" if parent else str(q["name"])
            if q.get("children"):
                walk(q["children"], path)
            else:
                out.append((path, q))

    walk(queues, "")
    return out


def _flavor_nodes(frame: dict[str, Any], flavor: str) -> list[dict[str, Any]]:
    return [n for c in frame["clusters"] for n in c["nodes"] if n["flavor"] == flavor]


def default_flavor(frame: dict[str, Any]) -> str | None:
    """The flavor with the most GPUs in the fleet."""
    gpus: dict[str, float] = defaultdict(float)
    for c in frame["clusters"]:
        for n in c["nodes"]:
            gpus[n["flavor"]] += n["count"] * (n.get("gpus") or 0)
    return max(sorted(gpus), key=lambda f: gpus[f]) if gpus else None


def tenant_leaves(jobs: list[Job], frame: dict[str, Any], flavor: str) -> dict[str, str]:
    """Each tenant's leaf name (module docstring)."""
    found = leaves(frame["queues"])
    if not found:
        raise TraceError({"tree": ["the tree has no queue to replay the trace on"]})
    by_name = {path: q["name"] for path, q in found} | {q["name"]: q["name"] for _p, q in found}
    demand: dict[str, float] = defaultdict(float)
    for j in jobs:
        demand[j.tenant] += j.gpus * j.duration_s
    out = {t: by_name[t] for t in demand if t in by_name}

    def leaf_min(q: dict[str, Any]) -> float:
        return float(((q.get("quota") or {}).get(flavor) or {}).get("gpu", {}).get("min") or 0)

    ranked = [q["name"] for _p, q in sorted(found, key=lambda pq: (-leaf_min(pq[1]), pq[0]))]
    rest = sorted((t for t in demand if t not in out), key=lambda t: (-demand[t], t))
    for i, t in enumerate(rest):
        out[t] = ranked[i % len(ranked)]
    return out


def _pods(job: Job, flavor: str, node: dict[str, Any]) -> list[dict[str, Any]]:
    size = int(node.get("gpus") or 1)
    cpu_per = float(node["cpu"]) / size / 2
    mem_per = float(node["memory_gib"]) / size / 2

    def pod(count: int, gpus: float) -> dict[str, Any]:
        cpu = max(0.1, round(cpu_per * max(gpus, 0.1), 3))
        mem = max(0.1, round(mem_per * max(gpus, 0.1), 3))
        if job.cpu is not None:
            cpu = min(cpu, max(0.1, round(job.cpu, 3)))
        if job.memory_gib is not None:
            mem = min(mem, max(0.1, round(job.memory_gib, 3)))
        return {"count": count, "flavors": [flavor], "gpus": gpus, "cpu": cpu,
                "memory_gib": mem}

    if job.gpus < 1:
        return [pod(1, round(job.gpus, 3))]
    g = int(math.ceil(job.gpus))
    pods = []
    if g >= size:
        pods.append(pod(g // size, size))
    if g % size:
        pods.append(pod(1, g % size))
    return pods


def pick_flavor(frame: dict[str, Any], flavor: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The flavor a CSV's jobs ask (default: the one with the most GPUs) and its nodes;
    TraceError if no ready node has it."""
    flavor = flavor or default_flavor(frame)
    nodes = _flavor_nodes(frame, flavor) if flavor else []
    if not flavor or not nodes:
        known = sorted({n["flavor"] for c in frame["clusters"] for n in c["nodes"]})
        raise TraceError({"flavor": [f"{flavor!r}: no ready node has it (the fleet has "
                                     f"{', '.join(known) or 'no ready node'})"]})
    return flavor, nodes


def check_on_frame(frame: dict[str, Any], *, flavor: str | None,
                   changes: dict[str, Any] | None) -> None:
    """What can be checked of a CSV trace's replay before the trace is read: the flavor and
    the quota changes on the live tree (TraceError naming each problem)."""
    pick_flavor(frame, flavor)
    variants({"name": "check", "until": 1, **frame, "workloads": []}, changes=changes,
             tree=None)


def trace_scenario(trace: Trace, frame: dict[str, Any], *, flavor: str | None,
                   name: str) -> dict[str, Any]:
    """The `current` scenario: a scenario file as it is, a CSV trace on `frame` (the live
    fleet and tree)."""
    if trace.scenario is not None:
        return copy.deepcopy(trace.scenario)
    flavor, nodes = pick_flavor(frame, flavor)
    node = max(nodes, key=lambda n: (n.get("gpus") or 0, n["cpu"]))
    to_leaf = tenant_leaves(trace.jobs, frame, flavor)
    workloads = [{"name": f"j{i}", "queue": to_leaf[j.tenant], "submit_at": round(j.submit_s, 3),
                  "duration_s": round(j.duration_s, 3), "pods": _pods(j, flavor, node)}
                 for i, j in enumerate(trace.jobs)]
    settings = dict(frame["settings"])
    settings["cycle_interval_s"] = max(MIN_CYCLE_S, float(settings.get("cycle_interval_s", 0)))
    return {"name": name, "until": math.ceil(trace.jobs[-1].submit_s + TAIL_S),
            **{k: copy.deepcopy(v) for k, v in frame.items() if k != "settings"},
            "settings": settings, "workloads": workloads,
            "x-tenants": dict(sorted(to_leaf.items()))}


def static_quotas(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy with every quota's max set to its min and lendable left out."""
    out = copy.deepcopy(doc)

    def walk(items: list[dict[str, Any]]) -> None:
        for q in items:
            for resources in (q.get("quota") or {}).values():
                for vals in resources.values():
                    vals["max"] = vals.get("min", 0)
                    vals.pop("lendable", None)
            walk(q.get("children") or [])

    walk(out["queues"])
    out["name"] = f"{doc.get('name', 'trace')} (static quotas)"
    return out


def proposal(doc: dict[str, Any], *, changes: dict[str, Any] | None,
             tree: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A copy with the proposed tree in place and the quota changes made; TraceError names
    each bad field."""
    out = copy.deepcopy(doc)
    if tree is not None:
        out["queues"] = copy.deepcopy(tree)
        have = {q["name"] for _p, q in leaves(tree)}
        missing = sorted({w["queue"] for w in out["workloads"]} - have)
        if missing:
            raise TraceError({"tree": [f"the proposed tree has no leaf {', '.join(missing)} "
                                       "(the trace's work goes there)"]})
    if changes:
        try:
            out = apply_changes(out, {"quotas": changes.get("quotas") or []})
        except WhatIfError as exc:
            raise TraceError(exc.problems) from exc
    out["name"] = f"{doc.get('name', 'trace')} (proposed)"
    return out


def variants(current: dict[str, Any], *, changes: dict[str, Any] | None,
             tree: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The three scenarios, each checked by the scenario loader (TraceError with its lines):
    the current one whole, the other two for their trees (their work is the same, and its
    leaves are checked to be there)."""
    docs = {"static": static_quotas(current), "current": current,
            "proposed": proposal(current, changes=changes, tree=tree)}
    for label, doc in docs.items():
        try:
            load_scenario(doc if label == "current" else {**doc, "workloads": []})
        except ScenarioError as exc:
            raise TraceError({label if label != "current" else "file": exc.problems}) from exc
    return docs
