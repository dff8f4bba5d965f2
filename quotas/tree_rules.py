"""The quota tree's rules (QUOTA-SEMANTICS.md §2) in one place, in pure Python.

Used by the Django admin and API (through `quotas.services`), the importers and the scenario
loader (which has no database). Input is a flat list of `QueueSpec`; output is the resolved
quotas (defaults applied) and the problems: errors (V1-V4, structure, depth limit: nothing may
be saved) and warnings (W1-W3: saved, shown where the change was made).

Every message names the queue, the key and the numbers, e.g.
`rd: a100-80g/gpu: children's min 20 > min 16`.

Defaults (§2): on a queue that sets a key, `lendable` defaults to `min` and `max` to the parent's
max. A queue that does not set an accounted key has min 0, lendable 0 and max = the parent's max
(at the top level: unlimited, written `None`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeAlias

from core.quantity import resource_name_problem

Number: TypeAlias = Any  # int, float or Decimal: the caller keeps one kind per tree
RESOURCES = ("gpu", "cpu", "memory")  # built in; extended resources are any other valid name
DEFAULT_MAX_DEPTH = 5
WARN_DEPTH = 3
WARN_CHILDREN = 5


@dataclass(frozen=True)
class QuotaSpec:
    """What a queue sets for one key; None means "not set" (the default applies)."""

    min: Number | None = None
    max: Number | None = None
    lendable: Number | None = None


@dataclass(frozen=True)
class QueueSpec:
    """One queue as written by a user: its path, its parent's path (None at the top level)."""

    path: str
    parent: str | None
    quota: Mapping[tuple[str, str], QuotaSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class Resolved:
    """A queue's effective values for one key; `max` None means unlimited."""

    min: Number
    max: Number | None
    lendable: Number

    @property
    def exclusive(self) -> Number:
        return self.min - self.lendable


@dataclass(frozen=True)
class Problem:
    """One broken rule or warning: a code (V1..V4, W1..W3, STRUCTURE), where, and a message."""

    code: str
    queue: str
    key: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class TreeReport:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    resolved: dict[str, dict[tuple[str, str], Resolved]] = field(default_factory=dict)
    accounted: set[tuple[str, str]] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.errors


def fmt(value: Number | None) -> str:
    """A number as people write it: 16, 0.5, unlimited."""
    if value is None:
        return "unlimited"
    if isinstance(value, Decimal):
        value = value.normalize()
        text = format(value, "f")
        return text
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def key_name(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}"


def _le(a: Number | None, b: Number | None) -> bool:
    """a <= b where None is +infinity."""
    if b is None:
        return True
    if a is None:
        return False
    return a <= b


def validate_tree(
    queues: Iterable[QueueSpec],
    *,
    flavors: Iterable[str] | None = None,
    fleet_capacity: Mapping[tuple[str, str], Number] | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> TreeReport:
    """Check the whole tree; return errors, warnings and the resolved quotas.

    `flavors`: the known flavor names (None: any name is accepted). `fleet_capacity`: installed
    capacity per key, for W3 (None: W3 is not checked).
    """
    report = TreeReport()
    err, warn = report.errors.append, report.warnings.append
    specs: dict[str, QueueSpec] = {}
    for spec in queues:
        if spec.path in specs:
            err(Problem("STRUCTURE", spec.path, "", f"{spec.path}: duplicate queue"))
            continue
        specs[spec.path] = spec
    known_flavors = set(flavors) if flavors is not None else None

    children: dict[str | None, list[str]] = defaultdict(list)
    for path, spec in specs.items():
        if spec.parent is not None and spec.parent not in specs:
            err(Problem("STRUCTURE", path, "", f"{path}: unknown parent queue {spec.parent!r}"))
            continue
        children[spec.parent].append(path)

    # Depth from the top level; a queue not reached from the top sits on a parent cycle.
    depth: dict[str, int] = {}
    frontier = [(p, 1) for p in children[None]]
    while frontier:
        path, d = frontier.pop()
        depth[path] = d
        frontier.extend((c, d + 1) for c in children[path])
    for path in specs:
        if path not in depth and specs[path].parent in specs:
            parent = specs[path].parent
            err(Problem("STRUCTURE", path, "", f"{path}: parent cycle through {parent}"))
    if report.errors:
        return report

    for path, d in depth.items():
        if d > max_depth:
            err(Problem("STRUCTURE", path, "", f"{path}: depth {d} > limit {max_depth}"))
        elif d > WARN_DEPTH:
            warn(Problem("W2", path, "", f"{path}: depth {d} > {WARN_DEPTH} "
                         "(deep trees lengthen reclaim chains)"))
    for parent, kids in children.items():
        if len(kids) > WARN_CHILDREN:
            name = parent or "(root)"
            warn(Problem("W2", name, "", f"{name}: {len(kids)} children > {WARN_CHILDREN} "
                         "(wide trees lengthen reclaim chains)"))

    # Keys, signs and V1 on what each queue sets.
    for path in sorted(specs, key=lambda p: depth[p]):
        for key, setq in specs[path].quota.items():
            flavor, resource = key
            kn = key_name(key)
            if known_flavors is not None and flavor not in known_flavors:
                err(Problem("STRUCTURE", path, kn, f"{path}: unknown flavor {flavor!r}"))
                continue
            problem = resource_name_problem(resource)
            if problem:
                err(Problem("STRUCTURE", path, kn, f"{path}: {problem}"))
                continue
            for name in ("min", "max", "lendable"):
                value = getattr(setq, name)
                if value is not None and value < 0:
                    err(Problem("V1", path, kn, f"{path}: {kn}: {name} {fmt(value)} < 0"))
            report.accounted.add(key)
    if report.errors:
        return report

    # Resolve defaults top-down, checking V1 and V3 on the way.
    order = sorted(specs, key=lambda p: depth[p])
    for path in order:
        spec = specs[path]
        parent_res = report.resolved.get(spec.parent, {}) if spec.parent else {}
        mine: dict[tuple[str, str], Resolved] = {}
        for key in report.accounted:
            kn = key_name(key)
            parent_max = parent_res[key].max if spec.parent else None
            q = spec.quota.get(key)
            if q is None:
                mine[key] = Resolved(min=0, max=parent_max, lendable=0)
                continue
            qmin = q.min if q.min is not None else 0
            qmax = q.max if q.max is not None else parent_max
            qlend = q.lendable if q.lendable is not None else qmin
            if not qlend <= qmin:
                err(Problem("V1", path, kn, f"{path}: {kn}: lendable {fmt(qlend)} > "
                            f"min {fmt(qmin)}"))
            if not _le(qmin, qmax):
                err(Problem("V1", path, kn, f"{path}: {kn}: min {fmt(qmin)} > max {fmt(qmax)}"))
            if spec.parent is not None and q.max is not None and not _le(q.max, parent_max):
                err(Problem("V3", path, kn, f"{path}: {kn}: max {fmt(q.max)} > parent "
                            f"{spec.parent} max {fmt(parent_max)}"))
            mine[key] = Resolved(min=qmin, max=qmax, lendable=qlend)
        report.resolved[path] = mine

    # V2, V4, W1 per parent below the root.
    for parent in order:
        kids = children.get(parent, [])
        if not kids:
            continue
        for key in sorted(report.accounted):
            kn = key_name(key)
            p = report.resolved[parent][key]
            kid_res = [report.resolved[c][key] for c in kids]
            sum_min = sum(r.min for r in kid_res)
            sum_excl = sum(r.exclusive for r in kid_res)
            if sum_min > p.min:
                err(Problem("V2", parent, kn, f"{parent}: {kn}: children's min {fmt(sum_min)} > "
                            f"min {fmt(p.min)}"))
            if sum_excl > p.exclusive:
                err(Problem("V4", parent, kn, f"{parent}: {kn}: children's exclusive "
                            f"{fmt(sum_excl)} > exclusive {fmt(p.exclusive)} "
                            f"(min {fmt(p.min)} - lendable {fmt(p.lendable)})"))
            if all(r.max is not None for r in kid_res):
                sum_max = sum(r.max for r in kid_res if r.max is not None)
                if sum_max < p.min:
                    warn(Problem("W1", parent, kn, f"{parent}: {kn}: children's max "
                                 f"{fmt(sum_max)} < min {fmt(p.min)}: some capacity can never "
                                 "be used"))

    if fleet_capacity is not None:
        for key in sorted(report.accounted):
            top_min = sum(report.resolved[t][key].min for t in children[None])
            cap = fleet_capacity.get(key, 0)
            if top_min > cap:
                kn = key_name(key)
                warn(Problem("W3", "(root)", kn, f"(root): {kn}: top-level min {fmt(top_min)} > "
                             f"installed capacity {fmt(cap)}: not every guarantee can be "
                             "honoured"))
    return report
