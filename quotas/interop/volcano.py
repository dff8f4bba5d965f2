"""Volcano: `Queue` (scheduling.volcano.sh/v1beta1) with hierarchical `spec.parent`.

Mapping: `deserved` -> min, `capability` -> max, and `guarantee.resource` (capacity reserved
for the queue, never shared) -> Allot's exclusive part, so lendable = deserved - guarantee.
Resource names carry the flavor: `<flavor>.allot.io/gpu|cpu|memory`; plain `nvidia.com/gpu`,
`cpu`, `memory` belong to the flavor given with `--flavor`. Volcano's own `root` queue is the
tree's root; a leaf's namespace travels in the `allot.io/namespace` annotation. Volcano reads
a resource missing from a non-empty capability as zero, so `capability` names every
quota-accounted key (filled-in ones listed in `allot.io/max-defaulted`, read back as unset).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from quotas.interop.common import (
    ANNOTATION_MAX_DEFAULTED,
    ExportQueue,
    Node,
    Obj,
    annotations_for,
    export_name,
    filled_max,
    max_defaulted_annotation,
    quantity_map,
)
from quotas.tree_rules import QuotaSpec

API = "scheduling.volcano.sh/v1beta1"
ROOT = "root"
ANNOTATION_NAMESPACE = "allot.io/namespace"


def read(objs: list[Obj], default_flavor: str | None) -> tuple[list[Node], list[str]]:
    """Nodes from Volcano Queues; warnings for what is ignored."""
    nodes, warnings = [], []
    for obj in objs:
        if obj.kind != "Queue":
            warnings.append(f"{obj.source}: {obj.label}: kind not imported (skipped)")
            continue
        if obj.name == ROOT:
            continue  # Volcano's own root queue: the tree's root
        parent = obj.get("spec.parent", str) or None
        deserved = obj.resource_list("spec.deserved", default_flavor)
        guarantee = obj.resource_list("spec.guarantee.resource", default_flavor)
        capability = obj.resource_list("spec.capability", default_flavor)
        defaulted = obj.max_defaulted(default_flavor)
        quota = {}
        for key in sorted(set(deserved) | set(guarantee) | set(capability)):
            if key in defaulted and key not in deserved and key not in guarantee:
                continue  # filled in by the exporter only: not set on this queue
            qmin = deserved.get(key, guarantee.get(key, Decimal(0)))
            lendable = None
            if key in guarantee:
                if guarantee[key] > qmin:
                    obj.fail("spec.guarantee.resource", f"{key[0]}/{key[1]}: guarantee "
                             f"{guarantee[key].normalize():f} > deserved {qmin.normalize():f}")
                lendable = qmin - guarantee[key]
            qmax = None if key in defaulted else capability.get(key)
            quota[key] = QuotaSpec(min=qmin, max=qmax, lendable=lendable)
        ns = obj.annotations().get(ANNOTATION_NAMESPACE, "")
        nodes.append(Node(
            obj=obj, name=obj.name, parent=None if parent == ROOT else parent, quota=quota,
            namespace=ns if isinstance(ns, str) else "", strategy=obj.strategy(),
            description=obj.description(),
        ))
    return nodes, warnings


def write(
    tree: list[ExportQueue], fleet: dict[tuple[str, str], Decimal] | None = None
) -> list[dict[str, Any]]:
    """Volcano Queues for the stored tree (`fleet`: installed capacity per key)."""
    maxes = filled_max(tree, fleet)
    docs = []
    for q in tree:
        notes = annotations_for(q.strategy, q.description)
        if not q.children and q.namespace:
            notes[ANNOTATION_NAMESPACE] = q.namespace
        meta: dict[str, Any] = {"name": export_name(q.path)}
        if notes:
            meta["annotations"] = notes
        spec: dict[str, Any] = {
            "weight": 1,
            "reclaimable": True,
            "parent": export_name(q.parent) if q.parent else ROOT,
        }
        deserved = {k: Decimal(s.min or 0) for k, s in q.quota.items()}
        # Volcano reads a resource missing from a non-empty capability as zero: write them all.
        capability, defaulted = maxes[q.path]
        if defaulted:
            meta.setdefault("annotations", {})[ANNOTATION_MAX_DEFAULTED] = (
                max_defaulted_annotation(defaulted)
            )
        guarantee = {k: Decimal(s.min or 0) - Decimal(s.lendable)
                     for k, s in q.quota.items() if s.lendable is not None}
        if capability:
            spec["capability"] = quantity_map(capability)
        if deserved:
            spec["deserved"] = quantity_map(deserved)
        if guarantee:
            spec["guarantee"] = {"resource": quantity_map(guarantee)}
        docs.append({"apiVersion": API, "kind": "Queue", "metadata": meta, "spec": spec})
    return docs
