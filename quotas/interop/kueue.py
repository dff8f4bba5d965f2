"""Kueue: ResourceFlavor, Cohort (hierarchical, `parentName`), ClusterQueue, LocalQueue.

Mapping (QUOTA-SEMANTICS.md §2): `nominalQuota` -> min, `nominalQuota + borrowingLimit` -> max,
`lendingLimit` -> lendable. A cohort's min is its own `nominalQuota` plus its children's min,
so on export a cohort's `nominalQuota` is its min less its children's. A cohort lends what its
children lend up (Kueue's SubtreeQuota: its own nominal plus the children's lent parts): without
a `lendingLimit` of its own, its lendable is its min less its children's exclusive parts
(min - lendable), and at most that with one; the exporter writes a cohort's `lendingLimit` only
when it differs from that. Resource names other than `nvidia.com/gpu`/`amd.com/gpu` (-> gpu),
`cpu` and `memory` are quota keys of their own, exported under the same name: MIG slices
(`nvidia.com/mig-1g.10gb`), HAMi's `nvidia.com/total-gpucores`, DRA device classes that Kueue
maps to a resource name (`deviceClassMappings`), virtual resources (`cpu_credits`).

Queues with children become Cohorts, leaves ClusterQueues with a LocalQueue in the leaf's
namespace. Allot's top-level queues share the fleet, so the exporter puts them under one root
Cohort (`allot-root`, annotated `allot.io/root: "true"`), which the importer drops again.

Kueue wants every flavor of a resource group to list every covered resource, so the exporter
pads missing ones with `nominalQuota: 0` and no limits; the importer reads such an entry as
"not set" (the same quota: min 0, lendable 0, max inherited).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from core.labels import labels_problems
from core.quantity import format_quantity, resource_name_problem
from quotas.interop.common import (
    ANNOTATION_GPU_MEMORY,
    ExportQueue,
    Key,
    Node,
    Obj,
    annotations_for,
    export_name,
)
from quotas.services import FlavorDef
from quotas.tree_rules import QuotaSpec

GROUP = "kueue.x-k8s.io"
KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
RESOURCE_NAMES = {"nvidia.com/gpu": "gpu", "amd.com/gpu": "gpu", "cpu": "cpu", "memory": "memory"}
EXPORT_NAMES = {"gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}
RESOURCE_ORDER = ("cpu", "memory", "gpu")
NS_LABEL = "kubernetes.io/metadata.name"
MAX_GPU_MEM = 2**31 - 1  # GiB per card: what the column holds
ROOT_COHORT = "allot-root"
ANNOTATION_ROOT = "allot.io/root"
ANNOTATION_GPU_EQUIVALENTS = "allot.io/gpu-equivalents"


def _resource_groups(obj: Obj, node: Node) -> None:
    groups = obj.get("spec.resourceGroups", list, [])
    seen: set[Key] = set()
    for gi, group in enumerate(groups):
        gpath = f"spec.resourceGroups[{gi}]"
        if not isinstance(group, Mapping):
            obj.fail(gpath, "must be a mapping")
        covered = group.get("coveredResources") or []
        if not isinstance(covered, list) or not all(isinstance(c, str) for c in covered):
            obj.fail(f"{gpath}.coveredResources", "must be a list of resource names")
        flavors = group.get("flavors") or []
        if not isinstance(flavors, list):
            obj.fail(f"{gpath}.flavors", "must be a list")
        for fi, flavor in enumerate(flavors):
            fpath = f"{gpath}.flavors[{fi}]"
            if not isinstance(flavor, Mapping) or not isinstance(flavor.get("name"), str):
                obj.fail(fpath, "must be a mapping with a name")
            resources = flavor.get("resources") or []
            if not isinstance(resources, list):
                obj.fail(f"{fpath}.resources", "must be a list")
            for ri, res in enumerate(resources):
                rpath = f"{fpath}.resources[{ri}]"
                if not isinstance(res, Mapping) or not isinstance(res.get("name"), str):
                    obj.fail(rpath, "must be a mapping with a name")
                rname = res["name"]
                problem = resource_name_problem(rname)
                if problem:
                    obj.fail(f"{rpath}.name", problem)
                if covered and rname not in covered:
                    obj.fail(f"{rpath}.name", f"{rname!r} is not in coveredResources")
                # Any other name (MIG slices, HAMi's nvidia.com/total-gpucores, a DRA device
                # class mapped to a resource, a virtual resource) is a quota key of its own.
                resource = RESOURCE_NAMES.get(rname, rname)
                key = (flavor["name"], resource)
                if key in seen:
                    obj.fail(rpath, f"{key[0]}/{key[1]} is listed twice")
                seen.add(key)
                if "nominalQuota" not in res:
                    obj.fail(f"{rpath}.nominalQuota", "is required")
                nominal = obj.amount(f"{rpath}.nominalQuota", resource, res["nominalQuota"])
                borrow = lend = None
                if res.get("borrowingLimit") is not None:
                    borrow = obj.amount(f"{rpath}.borrowingLimit", resource,
                                        res["borrowingLimit"])
                if res.get("lendingLimit") is not None:
                    lend = obj.amount(f"{rpath}.lendingLimit", resource, res["lendingLimit"])
                if nominal == 0 and borrow is None and lend is None:
                    continue  # padding for the resource group: the same as not set
                node.nominal[key] = nominal
                if borrow is not None:
                    node.borrowing[key] = borrow
                node.quota[key] = QuotaSpec(min=nominal, lendable=lend)


def _equivalents(obj: Obj) -> dict[str, float]:
    """A ResourceFlavor's `allot.io/gpu-equivalents` annotation (JSON: resource -> cards)."""
    raw = obj.annotations().get(ANNOTATION_GPU_EQUIVALENTS)
    if raw is None:
        return {}
    path = f"metadata.annotations[{ANNOTATION_GPU_EQUIVALENTS}]"
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
        for v in data.values()
    ):
        obj.fail(path, "must be a JSON object of resource names and numbers of cards, e.g. "
                 '{"nvidia.com/mig-3g.40gb": 0.5}')
    return {str(k): float(v) for k, v in (data or {}).items()}


def read(objs: list[Obj]) -> tuple[list[Node], list[FlavorDef], list[str]]:
    """Nodes and flavors from Kueue objects; warnings for what is ignored."""
    nodes: list[Node] = []
    flavors: list[FlavorDef] = []
    local_ns: dict[str, tuple[str, Obj]] = {}
    warnings: list[str] = []
    cohorts_referenced: dict[str, Obj] = {}
    roots: set[str] = set()
    for obj in objs:
        if obj.kind == "ResourceFlavor":
            labels = obj.get("spec.nodeLabels", Mapping, {})
            problems = labels_problems(labels)
            if problems:
                obj.fail("spec.nodeLabels", "; ".join(problems))
            mem = obj.annotations().get(ANNOTATION_GPU_MEMORY)
            gpu_mem = None
            if mem is not None:
                text = str(mem)
                if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_GPU_MEM:
                    obj.fail(f"metadata.annotations[{ANNOTATION_GPU_MEMORY}]",
                             f"{mem!r} is not a whole number from 1 to {MAX_GPU_MEM}")
                gpu_mem = int(str(mem))
            flavors.append(FlavorDef(name=obj.name, node_selector=dict(labels),
                                     gpu_memory_gib=gpu_mem,
                                     gpu_equivalents=_equivalents(obj)))
        elif obj.kind == "Cohort" and obj.annotations().get(ANNOTATION_ROOT) == "true":
            roots.add(obj.name)
        elif obj.kind in ("Cohort", "ClusterQueue"):
            if obj.kind == "Cohort":
                parent = obj.get("spec.parentName", str) or obj.get("spec.parent", str)
            else:
                parent = obj.get("spec.cohortName", str) or obj.get("spec.cohort", str)
                if parent:
                    cohorts_referenced.setdefault(parent, obj)
            node = Node(obj=obj, name=obj.name, parent=parent or None, add_children=True,
                        strategy=obj.strategy(), description=obj.description())
            _resource_groups(obj, node)
            if obj.kind == "ClusterQueue":
                ns = obj.get("spec.namespaceSelector.matchLabels", Mapping, {}).get(NS_LABEL)
                if isinstance(ns, str):
                    node.namespace = ns
            nodes.append(node)
        elif obj.kind == "LocalQueue":
            namespace = obj.get("metadata.namespace", str)
            cq = obj.get("spec.clusterQueue", str)
            if not namespace:
                obj.fail("metadata.namespace", "is required (the leaf's namespace)")
            if not cq:
                obj.fail("spec.clusterQueue", "is required")
            if cq in local_ns and local_ns[cq][0] != namespace:
                obj.fail("metadata.namespace", f"ClusterQueue {cq} already has a LocalQueue in "
                         f"namespace {local_ns[cq][0]} ({local_ns[cq][1].label}); Allot maps a "
                         "leaf queue to one namespace")
            local_ns[cq] = (namespace, obj)
        else:
            warnings.append(f"{obj.source}: {obj.label}: kind not imported (skipped)")
    for node in nodes:
        if node.parent in roots:
            node.parent = None
    defined = {n.name for n in nodes}
    for cohort, obj in cohorts_referenced.items():
        if cohort in roots:
            continue
        if cohort not in defined:
            # Kueue creates a cohort implicitly when a ClusterQueue names it.
            nodes.append(Node(obj=obj, name=cohort, parent=None, add_children=True,
                              implicit=True))
            defined.add(cohort)
    for cq, (namespace, obj) in local_ns.items():
        match = [n for n in nodes if n.name == cq and n.obj.kind == "ClusterQueue"]
        if not match:
            obj.fail("spec.clusterQueue", f"ClusterQueue {cq!r} is not defined")
        match[0].namespace = namespace
    return nodes, flavors, warnings


def _group(quota: Mapping[Key, dict[str, Any]]) -> list[dict[str, Any]]:
    if not quota:
        return []
    resources = sorted({k[1] for k in quota}, key=_resource_order)
    flavors = []
    for flavor in sorted({k[0] for k in quota}):
        entries = []
        for resource in resources:
            cell = quota.get((flavor, resource), {"nominalQuota": "0"})
            entries.append({"name": EXPORT_NAMES.get(resource, resource), **cell})
        flavors.append({"name": flavor, "resources": entries})
    return [{"coveredResources": [EXPORT_NAMES.get(r, r) for r in resources],
             "flavors": flavors}]


def _resource_order(resource: str) -> tuple[int, str]:
    """cpu, memory, gpu, then extended resources by name."""
    if resource in RESOURCE_ORDER:
        return RESOURCE_ORDER.index(resource), ""
    return len(RESOURCE_ORDER), resource


def _exclusive(spec: QuotaSpec | None) -> Decimal:
    """A child's exclusive part (min - lendable; lendable unset: all of min is lent)."""
    if spec is None or spec.lendable is None:
        return Decimal(0)
    return Decimal(spec.min or 0) - Decimal(spec.lendable)


def write(tree: list[ExportQueue], flavors: list[Any], *, version: str = "v1beta2") -> list[dict]:
    """Kueue manifests for the stored tree (`version`: v1beta1 or v1beta2)."""
    api = f"{GROUP}/{version}"
    by_path = {q.path: q for q in tree}
    docs: list[dict[str, Any]] = []
    if tree:
        docs.append({
            "apiVersion": api, "kind": "Cohort",
            "metadata": {"name": ROOT_COHORT, "annotations": {ANNOTATION_ROOT: "true"}},
            "spec": {},
        })
    for flavor in flavors:
        meta: dict[str, Any] = {"name": flavor.name}
        if flavor.gpu_memory_gib:
            meta["annotations"] = {ANNOTATION_GPU_MEMORY: str(flavor.gpu_memory_gib)}
        if flavor.gpu_equivalents:
            meta.setdefault("annotations", {})[ANNOTATION_GPU_EQUIVALENTS] = json.dumps(
                flavor.gpu_equivalents, sort_keys=True)
        doc: dict[str, Any] = {"apiVersion": api, "kind": "ResourceFlavor", "metadata": meta}
        doc["spec"] = {"nodeLabels": dict(flavor.node_selector)} if flavor.node_selector else {}
        docs.append(doc)
    for q in tree:
        cells: dict[Key, dict[str, Any]] = {}
        for key, spec in q.quota.items():
            qmin = Decimal(spec.min or 0)
            own = qmin - sum(
                (Decimal(by_path[c].quota[key].min or 0) for c in q.children
                 if key in by_path[c].quota), Decimal(0)
            )
            cell: dict[str, Any] = {"nominalQuota": format_quantity(key[1], own)}
            if spec.max is not None:
                cell["borrowingLimit"] = format_quantity(key[1], Decimal(spec.max) - qmin)
            derived = (qmin - sum((_exclusive(by_path[c].quota.get(key)) for c in q.children),
                                  Decimal(0))) if q.children else None
            if spec.lendable is not None and Decimal(spec.lendable) != derived:
                cell["lendingLimit"] = format_quantity(key[1], Decimal(spec.lendable))
            cells[key] = cell
        meta = {"name": export_name(q.path)}
        notes = annotations_for(q.strategy, q.description)
        if notes:
            meta["annotations"] = notes
        spec_doc: dict[str, Any] = {}
        parent = export_name(q.parent) if q.parent else ROOT_COHORT
        groups = _group(cells)
        if q.children:
            if parent:
                spec_doc["parentName"] = parent
            if groups:
                spec_doc["resourceGroups"] = groups
            docs.append({"apiVersion": api, "kind": "Cohort", "metadata": meta, "spec": spec_doc})
            continue
        if parent:
            spec_doc["cohortName" if version == "v1beta2" else "cohort"] = parent
        spec_doc["namespaceSelector"] = {"matchLabels": {NS_LABEL: q.namespace}}
        spec_doc["queueingStrategy"] = "BestEffortFIFO"
        spec_doc["preemption"] = {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
        }
        if groups:
            spec_doc["resourceGroups"] = groups
        docs.append({"apiVersion": api, "kind": "ClusterQueue", "metadata": meta,
                     "spec": spec_doc})
        docs.append({
            "apiVersion": api, "kind": "LocalQueue",
            "metadata": {"name": q.name, "namespace": q.namespace},
            "spec": {"clusterQueue": export_name(q.path)},
        })
    return docs
