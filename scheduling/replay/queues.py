"""The scenario's queue tree, checked by `quotas.tree_rules.validate_tree` (the same rules the
admin and the API apply) against the fleet's capacity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.quantity import resource_name_problem
from quotas import tree_rules
from scheduling.engine import ClusterSpec, KeyQuota, QueueSpec
from scheduling.replay.checker import STRATEGIES, Checker, label

QUEUE_KEYS = {"name", "quota", "children", "strategy"}


def parse_queues(c: Checker, raw: list[Any], flavors: set[str], clusters: list[ClusterSpec],
                 max_depth: int) -> tuple[list[QueueSpec], dict[str, str], list[str]]:
    """The `queues` tree: the engine's queues (quotas resolved), leaf name -> path, and the
    tree rules' warnings."""
    specs: list[tree_rules.QueueSpec] = []
    strategies: dict[str, str] = {}
    leaves: dict[str, str] = {}
    paths: dict[str, str] = {}

    def walk(items: list[Any], parent: str | None, where: str) -> None:
        for i, q in enumerate(items):
            qw = label(q, f"{where}[{i}]", "queue")
            if not c.keys(q, QUEUE_KEYS, {"name"}, qw):
                continue
            name = c.text(q, "name", qw)
            if not name or "/" in name:
                c.problems.append(f"{qw}: queue name {name!r} must be non-empty without '/'")
                continue
            if name in paths:
                c.problems.append(f"queue {name}: name used twice (names are unique)")
                continue
            path = f"{parent}/{name}" if parent else name
            paths[name] = path
            strategies[path] = c.text(q, "strategy", f"queue {path}", "", STRATEGIES)
            quota = _quota(c, q, path, flavors)
            specs.append(tree_rules.QueueSpec(path=path, parent=parent, quota=quota))
            kids = c.items(q, "children", f"queue {path}")
            if kids:
                walk(kids, path, f"queue {path} children")
            else:
                leaves[name] = path

    walk(raw, None, "queues")
    capacity: dict[tuple[str, str], float] = {}
    for cl in clusters:
        for n in cl.nodes:
            for res, v in (("gpu", n.gpus), ("cpu", n.cpu), ("memory", n.memory_gib),
                           *n.resources):
                capacity[(n.flavor, res)] = capacity.get((n.flavor, res), 0.0) + v
    report = tree_rules.validate_tree(specs, flavors=flavors, fleet_capacity=capacity,
                                      max_depth=max_depth)
    c.problems.extend(p.message for p in report.errors)
    out = []
    for spec in specs:
        resolved = report.resolved.get(spec.path, {})
        quota = {key: KeyQuota(min=float(r.min), max=None if r.max is None else float(r.max),
                               lendable=float(r.lendable)) for key, r in resolved.items()}
        out.append(QueueSpec(spec.path, spec.parent, quota, strategies.get(spec.path, "")))
    return out, leaves, [p.message for p in report.warnings]


def _quota(c: Checker, q: Mapping[str, Any], path: str,
           flavors: set[str]) -> dict[tuple[str, str], tree_rules.QuotaSpec]:
    """A queue's `quota` mapping (flavor -> resource -> min, max, lendable)."""
    quota: dict[tuple[str, str], tree_rules.QuotaSpec] = {}
    raw_q = q.get("quota") or {}
    if not isinstance(raw_q, Mapping):
        c.problems.append(f"queue {path}: quota must be a mapping of flavors")
        raw_q = {}
    for flavor, per_res in raw_q.items():
        if flavor not in flavors:
            c.problems.append(f"queue {path}: unknown flavor {flavor!r}")
            continue
        if not isinstance(per_res, Mapping):
            c.problems.append(f"queue {path} {flavor}: expected resources")
            continue
        for res, vals in per_res.items():
            kw = f"queue {path} {flavor}/{res}"
            problem = resource_name_problem(res)
            if problem:
                c.problems.append(f"{kw}: {problem}")
                continue
            if not c.keys(vals, {"min", "max", "lendable"}, set(), kw):
                continue
            quota[(flavor, res)] = tree_rules.QuotaSpec(
                min=c.qty(vals, "min", kw, None, res, lo=None),
                max=c.qty(vals, "max", kw, None, res, lo=None),
                lendable=c.qty(vals, "lendable", kw, None, res, lo=None))
    return quota
