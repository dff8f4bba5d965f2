"""Koordinator: `ElasticQuota` (scheduling.sigs.k8s.io/v1alpha1) trees.

The tree is in labels: `quota.scheduling.koordinator.sh/parent` names the parent quota
(Koordinator's `koordinator-root-quota` is the root) and `.../is-parent` marks inner quotas.
`spec.min` -> min, `spec.max` -> max. Koordinator lends a quota's unused min as a whole
(`allow-lent-resource`); Allot's finer `lendable` travels in the `allot.io/lendable`
annotation. A leaf quota lives in the leaf's namespace; inner quotas in `default`.

Koordinator's webhook wants every min resource in max, and a parent's and its children's max
to name the same resources, so the exporter writes max for every quota-accounted key: the
queue's own max, else the inherited one, else (unlimited) the larger of the fleet's installed
capacity and the largest number in the tree. Those filled-in keys are listed in the
`allot.io/max-defaulted` annotation, so an import restores "not set".
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from quotas.interop.common import (
    ANNOTATION_LENDABLE,
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

API = "scheduling.sigs.k8s.io/v1alpha1"
LABEL_PARENT = "quota.scheduling.koordinator.sh/parent"
LABEL_IS_PARENT = "quota.scheduling.koordinator.sh/is-parent"
LABEL_ALLOW_LENT = "quota.scheduling.koordinator.sh/allow-lent-resource"
ROOT = "koordinator-root-quota"
SYSTEM_QUOTAS = {ROOT, "koordinator-system-quota", "koordinator-default-quota"}
INNER_NAMESPACE = "default"


def read(objs: list[Obj], default_flavor: str | None) -> tuple[list[Node], list[str]]:
    """Nodes from ElasticQuotas; warnings for what is ignored."""
    nodes, warnings = [], []
    namespaces: dict[str, list[Node]] = {}
    for obj in objs:
        if obj.kind != "ElasticQuota":
            warnings.append(f"{obj.source}: {obj.label}: kind not imported (skipped)")
            continue
        if obj.name in SYSTEM_QUOTAS:
            continue
        parent = obj.labels().get(LABEL_PARENT)
        if parent is not None and not isinstance(parent, str):
            obj.fail(f"metadata.labels[{LABEL_PARENT}]", "must be a string")
        is_parent = obj.labels().get(LABEL_IS_PARENT, "false")
        if is_parent not in ("true", "false"):
            obj.fail(f"metadata.labels[{LABEL_IS_PARENT}]", f"{is_parent!r} is not \"true\" "
                     "or \"false\"")
        qmin = obj.resource_list("spec.min", default_flavor)
        qmax = obj.resource_list("spec.max", default_flavor)
        lendable = obj.lendable_annotation(default_flavor)
        defaulted = obj.max_defaulted(default_flavor)
        quota = {}
        for key in sorted(set(qmin) | set(qmax) | set(lendable)):
            if key in defaulted and key not in qmin and key not in lendable:
                continue  # filled in by the exporter only: not set on this queue
            quota[key] = QuotaSpec(
                min=qmin.get(key, Decimal(0)),
                max=None if key in defaulted else qmax.get(key),
                lendable=lendable.get(key),
            )
        node = Node(obj=obj, name=obj.name, parent=None if parent in (None, "", ROOT) else parent,
                    quota=quota, strategy=obj.strategy(), description=obj.description())
        ns = obj.get("metadata.namespace", str, "")
        if ns and is_parent == "false":
            namespaces.setdefault(ns, []).append(node)
        nodes.append(node)
    for ns, users in namespaces.items():
        if len(users) == 1:
            users[0].namespace = ns
        else:
            names = ", ".join(sorted(n.name for n in users))
            warnings.append(f"namespace {ns} holds several leaf quotas ({names}); each "
                            "gets its own default namespace")
    return nodes, warnings


def write(
    tree: list[ExportQueue], fleet: dict[tuple[str, str], Decimal] | None = None
) -> list[dict[str, Any]]:
    """ElasticQuotas for the stored tree (`fleet`: installed capacity per key)."""
    maxes = filled_max(tree, fleet)
    docs = []
    for q in tree:
        is_parent = bool(q.children)
        lendable = {k: Decimal(s.lendable) for k, s in q.quota.items() if s.lendable is not None}
        lends = any(Decimal(s.min or 0) > 0 if s.lendable is None else s.lendable > 0
                    for s in q.quota.values())
        notes = annotations_for(q.strategy, q.description)
        if lendable:
            notes[ANNOTATION_LENDABLE] = json.dumps(quantity_map(lendable), sort_keys=True)
        meta: dict[str, Any] = {
            "name": export_name(q.path),
            "namespace": INNER_NAMESPACE if is_parent else (q.namespace or INNER_NAMESPACE),
            "labels": {
                LABEL_PARENT: export_name(q.parent) if q.parent else ROOT,
                LABEL_IS_PARENT: "true" if is_parent else "false",
                LABEL_ALLOW_LENT: "true" if lends else "false",
            },
        }
        if notes:
            meta["annotations"] = notes
        spec: dict[str, Any] = {}
        qmax, defaulted = maxes[q.path]
        if defaulted:
            meta.setdefault("annotations", {})[ANNOTATION_MAX_DEFAULTED] = (
                max_defaulted_annotation(defaulted)
            )
        qmin = {k: Decimal(s.min or 0) for k, s in q.quota.items()}
        if qmax:
            spec["max"] = quantity_map(qmax)
        if qmin:
            spec["min"] = quantity_map(qmin)
        docs.append({"apiVersion": API, "kind": "ElasticQuota", "metadata": meta, "spec": spec})
    return docs
