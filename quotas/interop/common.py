"""What the three formats share: objects read into `Node`s, then one tree of `QueueDef`s."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError

from core.quantity import QuantityError, format_quantity, resource_name_problem, to_amount
from quotas.services import QueueDef
from quotas.tree_rules import QuotaSpec

Key = tuple[str, str]
ANNOTATION_STRATEGY = "allot.io/strategy"
ANNOTATION_DESCRIPTION = "allot.io/description"
ANNOTATION_LENDABLE = "allot.io/lendable"
ANNOTATION_GPU_MEMORY = "allot.io/gpu-memory-gib"
ANNOTATION_MAX_DEFAULTED = "allot.io/max-defaulted"
FLAVOR_DOMAIN = "allot.io"
STANDARD_RESOURCES = {"nvidia.com/gpu": "gpu", "amd.com/gpu": "gpu", "cpu": "cpu",
                      "memory": "memory"}
_FLAVORED = re.compile(r"^(?P<flavor>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.allot\.io/"
                       r"(?P<resource>.+)$")


class Obj:
    """One Kubernetes object being read: typed field access with errors naming kind/name/field."""

    def __init__(self, doc: Mapping[str, Any], source: str):
        self.doc = doc
        self.kind = doc.get("kind") if isinstance(doc.get("kind"), str) else "?"
        meta = doc.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        self.name = name if isinstance(name, str) else "?"
        self.label = f"{self.kind}/{self.name}"
        self.source = source
        if not isinstance(meta, Mapping):
            self.fail("metadata", "must be a mapping with a name")
        if not isinstance(name, str) or not name:
            self.fail("metadata.name", "must be a non-empty string")

    def fail(self, path: str, message: str) -> None:
        raise ValidationError(f"{self.source}: {self.label}: {path}: {message}")

    def get(self, path: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        """The value at a dotted path (`spec.cohort`), checked against `kind`."""
        node: Any = self.doc
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        if node is None:
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(node, kinds) or (isinstance(node, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            self.fail(path, f"must be a {names}, not {type(node).__name__}")
        return node

    def text(self, path: str) -> str:
        return self.get(path, str, "")

    def labels(self) -> Mapping[str, Any]:
        return self.get("metadata.labels", Mapping, {})

    def annotations(self) -> Mapping[str, Any]:
        return self.get("metadata.annotations", Mapping, {})

    def amount(self, path: str, resource: str, value: Any) -> Decimal:
        try:
            return to_amount(resource, value)
        except QuantityError as exc:
            self.fail(path, str(exc))
            raise  # unreachable: fail raises

    def resource_key(self, path: str, name: Any, default_flavor: str | None) -> Key:
        """A ResourceList name as (flavor, resource): `<flavor>.allot.io/gpu`, or a standard
        name (`nvidia.com/gpu`, `cpu`, `memory`) of the default flavor."""
        if not isinstance(name, str):
            self.fail(path, f"resource name {name!r} is not a string")
        match = _FLAVORED.match(name)
        if match:
            problem = resource_name_problem(match["resource"])
            if problem:
                self.fail(path, problem)
            return match["flavor"], match["resource"]
        problem = resource_name_problem(name)
        if problem:
            self.fail(path, problem)
        resource = STANDARD_RESOURCES.get(name, name)
        if not default_flavor:
            self.fail(path, f"resource {name!r} names no flavor: pass --flavor NAME, or "
                      f"write <flavor>.{FLAVOR_DOMAIN}/{resource}")
        return str(default_flavor), resource

    def resource_list(self, path: str, default_flavor: str | None) -> dict[Key, Decimal]:
        """A ResourceList at `path` as amounts per key."""
        data = self.get(path, Mapping, {})
        out: dict[Key, Decimal] = {}
        for name, value in data.items():
            key = self.resource_key(path, name, default_flavor)
            if key in out:
                self.fail(path, f"{name!r} repeats {key[0]}/{key[1]}")
            out[key] = self.amount(f"{path}[{name}]", key[1], value)
        return out

    def lendable_annotation(self, default_flavor: str | None) -> dict[Key, Decimal]:
        raw = self.annotations().get(ANNOTATION_LENDABLE)
        if raw is None:
            return {}
        path = f"metadata.annotations[{ANNOTATION_LENDABLE}]"
        try:
            data = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            self.fail(path, "must be a JSON object of resource quantities")
        out = {}
        for name, value in (data or {}).items():
            key = self.resource_key(path, name, default_flavor)
            out[key] = self.amount(f"{path}[{name}]", key[1], value)
        return out

    def max_defaulted(self, default_flavor: str | None) -> set[Key]:
        """Keys whose max the exporter filled in (the queue does not set it)."""
        raw = self.annotations().get(ANNOTATION_MAX_DEFAULTED, "")
        path = f"metadata.annotations[{ANNOTATION_MAX_DEFAULTED}]"
        if not isinstance(raw, str):
            self.fail(path, "must be a comma-separated list of resource names")
        return {self.resource_key(path, name.strip(), default_flavor)
                for name in raw.split(",") if name.strip()}

    def strategy(self) -> str:
        value = self.annotations().get(ANNOTATION_STRATEGY, "")
        if value not in ("", "binpack", "spread"):
            self.fail(f"metadata.annotations[{ANNOTATION_STRATEGY}]",
                      f"{value!r} is not binpack or spread")
        return str(value)

    def description(self) -> str:
        value = self.annotations().get(ANNOTATION_DESCRIPTION, "")
        return value if isinstance(value, str) else ""


@dataclass
class Node:
    """A queue as read from one object, before the tree is assembled."""

    obj: Obj
    name: str
    parent: str | None
    quota: dict[Key, QuotaSpec] = field(default_factory=dict)
    # Kueue: a cohort's min is its own nominalQuota plus its children's min; `nominal` holds
    # the own part and `add_children` says to add.
    nominal: dict[Key, Decimal] = field(default_factory=dict)
    borrowing: dict[Key, Decimal] = field(default_factory=dict)
    add_children: bool = False
    namespace: str = ""
    strategy: str = ""
    description: str = ""
    implicit: bool = False


def child_name(name: str, parent: str | None) -> str:
    """The queue name inside its parent: `rd.vision` under `rd` is `vision`."""
    if parent:
        for sep in (".", "-"):
            if name.startswith(parent + sep) and len(name) > len(parent) + 1:
                name = name[len(parent) + 1:]
                break
    return name.replace(".", "-")


def _exclusive(spec: QuotaSpec | None) -> Decimal:
    """A queue's exclusive part as read (min - lendable; lendable unset: none)."""
    if spec is None or spec.lendable is None:
        return Decimal(0)
    return Decimal(spec.min or 0) - Decimal(spec.lendable)


def export_name(path: str) -> str:
    """The object name of a queue: its path with `/` -> `.` (the `allot.io/queue` label)."""
    return path.replace("/", ".")


def build_tree(nodes: Iterable[Node]) -> list[QueueDef]:
    """Assemble the objects into a tree of QueueDefs (paths from parents; Kueue min sums)."""
    by_name: dict[str, Node] = {}
    for node in nodes:
        if node.name in by_name:
            other = by_name[node.name]
            if node.implicit:
                continue
            if not other.implicit:
                node.obj.fail("metadata.name", f"defined twice ({other.obj.label} too)")
        by_name[node.name] = node
    children: dict[str | None, list[str]] = {}
    for name, node in by_name.items():
        if node.parent is not None and node.parent not in by_name:
            node.obj.fail("parent", f"parent {node.parent!r} is not defined")
        children.setdefault(node.parent, []).append(name)

    paths: dict[str, str] = {}
    stack: list[tuple[str, str | None]] = [(n, None) for n in sorted(children.get(None, []))]
    while stack:
        name, parent_path = stack.pop()
        qname = child_name(name, by_name[name].parent)
        path = f"{parent_path}/{qname}" if parent_path else qname
        paths[name] = path
        stack.extend((c, path) for c in sorted(children.get(name, [])))
    for name, node in by_name.items():
        if name not in paths:
            node.obj.fail("parent", f"parent cycle through {node.parent!r}")

    # Kueue min sums, children first.
    final_min: dict[str, dict[Key, Decimal]] = {}
    for name in sorted(paths, key=lambda n: -paths[n].count("/")):
        node = by_name[name]
        if not node.add_children:
            final_min[name] = {k: Decimal(s.min or 0) for k, s in node.quota.items()}
            continue
        sums: dict[Key, Decimal] = {}
        for child in children.get(name, []):
            for key, value in final_min[child].items():
                sums[key] = sums.get(key, Decimal(0)) + value
        keys = set(node.nominal) | {k for k, v in sums.items() if v > 0}
        mins = {k: node.nominal.get(k, Decimal(0)) + sums.get(k, Decimal(0)) for k in keys}
        final_min[name] = mins
        for key in keys:
            borrow = node.borrowing.get(key)
            lend = node.quota.get(key, QuotaSpec()).lendable
            if children.get(name):
                # A cohort lends what its children lend up: its min less their exclusive
                # parts (capped by its own lendingLimit when it sets one).
                derived = mins[key] - sum(
                    (_exclusive(by_name[c].quota.get(key)) for c in children[name]),
                    Decimal(0))
                lend = derived if lend is None else min(Decimal(lend), derived)
            node.quota[key] = QuotaSpec(
                min=mins[key], max=None if borrow is None else mins[key] + borrow, lendable=lend
            )

    defs = []
    for name in sorted(paths, key=lambda n: paths[n]):
        node = by_name[name]
        is_leaf = not children.get(name)
        defs.append(QueueDef(
            path=paths[name], quota=dict(node.quota), strategy=node.strategy,
            namespace=node.namespace if is_leaf else "", description=node.description,
        ))
    return defs


def quantity_map(keys: Mapping[Key, Decimal]) -> dict[str, str]:
    """Amounts per key as a ResourceList with flavor-qualified names."""
    return {f"{k[0]}.{FLAVOR_DOMAIN}/{k[1]}": format_quantity(k[1], v)
            for k, v in sorted(keys.items())}


def annotations_for(strategy: str, description: str) -> dict[str, str]:
    out = {}
    if strategy:
        out[ANNOTATION_STRATEGY] = strategy
    if description:
        out[ANNOTATION_DESCRIPTION] = description
    return out


@dataclass
class ExportQueue:
    """A stored queue as exporters see it."""

    path: str
    parent: str | None
    name: str
    namespace: str
    strategy: str
    description: str
    quota: dict[Key, QuotaSpec]
    children: list[str]


def export_tree() -> list[ExportQueue]:
    """The stored tree, parents before children."""
    from quotas import selectors
    from quotas.models import Queue

    specs = selectors.tree_specs()
    children: dict[str, list[str]] = {}
    for spec in specs.values():
        if spec.parent:
            children.setdefault(spec.parent, []).append(spec.path)
    out = []
    for q in Queue.objects.order_by("depth", "path"):
        spec = specs[q.path]
        out.append(ExportQueue(
            path=q.path, parent=spec.parent, name=q.name, namespace=q.namespace,
            strategy=q.strategy, description=q.description, quota=dict(spec.quota),
            children=sorted(children.get(q.path, [])),
        ))
    return out


def filled_max(
    tree: list[ExportQueue], fleet: Mapping[Key, Decimal] | None
) -> dict[str, tuple[dict[Key, Decimal], list[Key]]]:
    """Per queue, a max for every quota-accounted key and the keys that were filled in.

    Volcano and Koordinator treat a resource missing from max (capability) as zero, so
    exporters write every key: the queue's own max, else the inherited one, else (unlimited)
    the larger of the fleet's installed capacity and the largest number in the tree.
    """
    from quotas.tree_rules import QueueSpec, validate_tree

    report = validate_tree([QueueSpec(q.path, q.parent, q.quota) for q in tree])
    ceiling: dict[Key, Decimal] = {}
    for key in report.accounted:
        numbers = [Decimal((fleet or {}).get(key, 0))]
        for res in report.resolved.values():
            numbers.append(Decimal(res[key].min))
            top = res[key].max
            if top is not None:
                numbers.append(Decimal(top))
        ceiling[key] = max(numbers)
    out: dict[str, tuple[dict[Key, Decimal], list[Key]]] = {}
    for q in tree:
        values: dict[Key, Decimal] = {}
        filled: list[Key] = []
        for key in sorted(report.accounted):
            own = q.quota.get(key)
            if own is not None and own.max is not None:
                values[key] = Decimal(own.max)
                continue
            inherited = report.resolved[q.path][key].max
            values[key] = ceiling[key] if inherited is None else Decimal(inherited)
            filled.append(key)
        out[q.path] = (values, filled)
    return out


def max_defaulted_annotation(filled: list[Key]) -> str:
    """The `allot.io/max-defaulted` value: the filled-in keys' resource names."""
    return ",".join(quantity_map({k: Decimal(0) for k in filled}))
