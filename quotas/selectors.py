"""Reads of the quota tree: specs for validation, the nested tree with resolved quotas, usage."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, Sum

from core.quantity import QuantityError, base_to_amount, format_quantity, unit
from portal.pages.access import Scope
from quotas.models import Flavor, Queue, QuotaEntry, Team
from quotas.tree_rules import QueueSpec, QuotaSpec, validate_tree
from scheduling.models import Cluster, Node

Key = tuple[str, str]
USAGE_FIELDS = ("used", "borrowed", "lent", "pending")
ZERO = Decimal(0)


def _queue_rows_by_path() -> list[dict[str, Any]]:
    """Every queue as a plain row (no model instances), in the database's path order."""
    rows: list[dict[str, Any]] = [
        dict(r)
        for r in Queue.objects.order_by("path").values(
            "id", "path", "name", "parent_id", "depth", "strategy", "namespace", "description"
        )
    ]
    path_of = {r["id"]: r["path"] for r in rows}
    for r in rows:
        r["parent_path"] = path_of.get(r["parent_id"])
    return rows


def _quota_specs() -> dict[int, dict[Key, QuotaSpec]]:
    """What each queue sets, by queue id, in entry order."""
    quotas: dict[int, dict[Key, QuotaSpec]] = defaultdict(dict)
    rows = QuotaEntry.objects.order_by("pk").values_list(
        "queue_id", "flavor__name", "resource", "min_base", "max_base", "lendable_base",
        "min", "max", "lendable",
    )
    for queue_id, flavor, resource, bmin, bmax, blend, qmin, qmax, lend in rows:
        quotas[queue_id][(flavor, resource)] = QuotaSpec(
            min=_exact(resource, bmin, qmin), max=_exact(resource, bmax, qmax),
            lendable=_exact(resource, blend, lend))
    return quotas


def _exact(resource: str, base: int | None, shown: Decimal | None) -> Decimal | None:
    """The exact amount from the base-unit integer, unless the rounded column was changed
    without it (a bulk `update()` skips `QuotaEntry.save`): then the rounded one."""
    if shown is None:
        return None
    if base is None:
        return Decimal(shown)
    amount = base_to_amount(resource, base)
    if amount == shown or amount.quantize(_PLACE) == shown:
        return amount
    return Decimal(shown)


_PLACE = Decimal("0.001")


def _specs_from(
    queues: list[dict[str, Any]], quotas: dict[int, dict[Key, QuotaSpec]]
) -> dict[str, QueueSpec]:
    # A stable sort by depth keeps the database's path order within a depth: the same order
    # as ORDER BY depth, path.
    return {
        q["path"]: QueueSpec(
            path=q["path"], parent=q["parent_path"], quota=dict(quotas.get(q["id"], {}))
        )
        for q in sorted(queues, key=lambda q: q["depth"])
    }


def tree_specs() -> dict[str, QueueSpec]:
    """The stored tree as `QueueSpec`s (what each queue sets, None where unset), by path."""
    return _specs_from(_queue_rows_by_path(), _quota_specs())


def fleet_capacity() -> dict[Key, Decimal]:
    """Installed capacity per key over all clusters' nodes, healthy or not (rule W3)."""
    capacity: dict[Key, Decimal] = {}
    rows = Node.objects.values("flavor__name").annotate(
        gpus=Sum("gpus"), cpu=Sum("cpu"), memory=Sum("memory_gib")
    )
    for row in rows:
        flavor = row["flavor__name"]
        capacity[(flavor, "gpu")] = Decimal(row["gpus"] or 0)
        capacity[(flavor, "cpu")] = Decimal(row["cpu"] or 0)
        capacity[(flavor, "memory")] = Decimal(row["memory"] or 0)
    return capacity


def flavor_names() -> set[str]:
    """The names of the known flavors."""
    return set(Flavor.objects.values_list("name", flat=True))


def max_tree_depth() -> int:
    """The hard depth limit of the tree (setting ALLOT_MAX_TREE_DEPTH)."""
    return int(settings.ALLOT_MAX_TREE_DEPTH)


def quota_usage() -> Mapping[str, Mapping[Key, Mapping[str, Decimal]]]:
    """Usage per queue path and key: `{"used", "borrowed", "lent", "pending"}`; missing is 0.

    The single place the tree views read usage from (computed by the scheduling side).
    """
    from scheduling.selectors import queue_usage

    return queue_usage()


def fleet_usage() -> Mapping[tuple[str, str], Mapping[str, Decimal]]:
    """Used resources per (cluster name, flavor name): `{"gpu", "cpu", "memory"}`; missing is 0.

    The single place the cluster views read usage from (open admissions).
    """
    from scheduling.selectors import fleet_usage as scheduling_fleet_usage

    return scheduling_fleet_usage()


def gpus_free(ready: int, used: int) -> int:
    """Free GPUs of one cluster and GPU model (`scheduling.selectors.gpus_free`, the rule)."""
    from scheduling.selectors import gpus_free as scheduling_gpus_free

    return scheduling_gpus_free(ready, used)


def submittable_queue_ids(user: Any) -> set[int]:
    """Ids of the leaves the user's teams may submit to (a team's queue covers its subtree)."""
    if user is None or not user.is_authenticated:
        return set()
    granted = list(
        Queue.objects.filter(teams__in=Team.objects.filter(members=user)).values_list(
            "path", flat=True
        )
    )
    if not granted:
        return set()
    cond = Q()
    for path in granted:
        cond |= Q(path=path) | Q(path__startswith=f"{path}/")
    return set(
        Queue.objects.filter(cond).filter(children__isnull=True).values_list("pk", flat=True)
    )


def _number(value: Decimal | None) -> Decimal | None:
    """Decimals as stored (3 places) normalised for display: 16, 0.5."""
    if value is None:
        return None
    value = Decimal(value)
    return value.quantize(Decimal(1)) if value == value.to_integral() else value.normalize()


def queue_tree(
    *, user: AbstractBaseUser | AnonymousUser | None = None, root: str | None = None
) -> list[dict[str, Any]]:
    """The tree as nested dicts, each with resolved quotas and usage per flavor and resource.

    `quota` is `{flavor: {resource: {min, max, lendable, set, used, borrowed, lent, pending,
    unit, quantities}}}` (`unit`: GiB, cores, GPUs or "" for a count; `quantities`: min, max
    and lendable exactly, as Kubernetes quantities)
    over every quota-accounted key (`set` says whether the queue sets the key itself; `max`
    None means unlimited). `can_submit` is true on leaves the user's teams may use.
    With `root`, only that queue's subtree (a one-element list; empty if unknown).
    """
    # Two plain queries for the tree (no model instances), one for usage, one or two for the
    # user's leaves: a constant number, whatever the tree's size.
    queues = _queue_rows_by_path()
    specs = _specs_from(queues, _quota_specs())
    report = validate_tree(specs.values())
    usage = quota_usage()
    allowed = submittable_queue_ids(user)
    parents = {q["parent_id"] for q in queues}
    keys = sorted(report.accounted)
    if root is not None:
        prefix = f"{root}/"
        queues = [q for q in queues if q["path"] == root or q["path"].startswith(prefix)]
    numbers: dict[Decimal, Decimal | None] = {}

    def number(value: Decimal | None) -> Decimal | None:
        # Equal values normalise alike: memoised, as a tree repeats a few values many times.
        if value is None:
            return None
        out = numbers.get(value)
        if out is None:
            out = numbers[value] = _number(value)
        return out

    written: dict[tuple[str, Decimal], str | None] = {}

    def quantity(resource: str, value: Decimal | None) -> str | None:
        # The exact amount as a Kubernetes quantity (`4G`, `500m`), memoised likewise.
        if value is None:
            return None
        out = written.get((resource, value), "")
        if out == "":
            try:
                out = format_quantity(resource, value)
            except QuantityError:
                out = None
            written[(resource, value)] = out
        return out

    no_usage: dict[Key, Mapping[str, Decimal]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for q in queues:
        path = q["path"]
        spec = specs.get(path)
        resolved = report.resolved.get(path, {})
        queue_use = usage.get(path, no_usage)
        quota: dict[str, dict[str, dict[str, Any]]] = {}
        for key in keys:
            res = resolved.get(key)
            if res is None:
                continue
            use = queue_use.get(key, {})
            quota.setdefault(key[0], {})[key[1]] = {
                "min": number(res.min),
                "max": number(res.max),
                "lendable": number(res.lendable),
                "set": spec is not None and key in spec.quota,
                **{f: number(use.get(f, ZERO)) for f in USAGE_FIELDS},
                "unit": unit(key[1]),
                "quantities": {f: quantity(key[1], getattr(res, f))
                               for f in ("min", "max", "lendable")},
            }
        is_leaf = q["id"] not in parents
        nodes[path] = {
            "id": q["id"],
            "path": path,
            "name": q["name"],
            "parent": path.rsplit("/", 1)[0] if "/" in path else None,
            "depth": q["depth"],
            "strategy": q["strategy"],
            "namespace": q["namespace"],
            "description": q["description"],
            "is_leaf": is_leaf,
            "can_submit": is_leaf and q["id"] in allowed,
            "quota": quota,
            "children": [],
        }
    top: list[dict[str, Any]] = []
    for node in nodes.values():
        parent = node["parent"]
        (nodes[parent]["children"] if parent in nodes else top).append(node)
    if root is not None:
        return [nodes[root]] if root in nodes else []
    return top


def queue_rows(*, user: AbstractBaseUser | AnonymousUser | None = None,
               scope: Scope | None = None) -> list[dict[str, Any]]:
    """The tree flattened depth-first (for tables indented by depth); with `scope`, only the
    queues it may see (`visible_nodes`, the API's rule)."""
    rows: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]]) -> None:
        for item in items:
            rows.append(item)
            walk(item["children"])

    nodes = queue_tree(user=user)
    walk(nodes if scope is None else visible_nodes(nodes, scope))
    return rows


def visible_nodes(nodes: list[dict[str, Any]], scope: Scope) -> list[dict[str, Any]]:
    """The nodes a user may see, with hidden queues' visible descendants lifted into their place.

    Researchers and leads see their teams' queues, the subtrees below them and the ancestors
    strictly inside the department (the same rule as the pages, `portal.pages.access`); other
    teams' queues are hidden, so each node's `parent` may name a queue the list leaves out.
    Platform admins see everything.
    """
    if scope.is_admin:
        return nodes
    out: list[dict[str, Any]] = []
    for node in nodes:
        children = visible_nodes(node["children"], scope)
        if scope.can_see_queue(node["id"]):
            out.append({**node, "children": children})
        else:
            out.extend(children)
    return out


def tree_flavors(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The (flavor, resources) columns the rows carry, in a stable order."""
    seen: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        for flavor, resources in row["quota"].items():
            seen[flavor].update(resources)
    order = {"gpu": 0, "cpu": 1, "memory": 2}
    return [(f, sorted(seen[f], key=lambda r: order.get(r, 9))) for f in sorted(seen)]


def cluster_list(*, name: str | None = None) -> list[dict[str, Any]]:
    """Clusters with capacity, used and health per flavor (and their nodes when `name`)."""
    clusters = Cluster.objects.order_by("name")
    if name is not None:
        clusters = clusters.filter(name=name)
    clusters_list = list(clusters)
    if not clusters_list:
        return []
    nodes = list(
        Node.objects.filter(cluster__in=clusters_list)
        .select_related("flavor")
        .order_by("cluster_id", "name")
    )
    usage = fleet_usage()
    by_cluster: dict[int, list[Node]] = defaultdict(list)
    for node in nodes:
        by_cluster[node.cluster_id].append(node)
    out = []
    for cluster in clusters_list:
        flavors: dict[str, dict[str, Any]] = {}
        for node in by_cluster[cluster.pk]:
            f = flavors.setdefault(node.flavor.name, {
                "capacity": {"gpu": 0, "cpu": ZERO, "memory": ZERO},
                "allocatable": {"gpu": 0, "cpu": ZERO, "memory": ZERO},
                "nodes": 0, "ready_nodes": 0,
            })
            f["nodes"] += 1
            f["capacity"]["gpu"] += node.gpus
            f["capacity"]["cpu"] += node.cpu
            f["capacity"]["memory"] += node.memory_gib
            if node.ready:
                f["ready_nodes"] += 1
                f["allocatable"]["gpu"] += node.gpus
                f["allocatable"]["cpu"] += node.cpu
                f["allocatable"]["memory"] += node.memory_gib
        for flavor, f in flavors.items():
            use = usage.get((cluster.name, flavor), {})
            f["used"] = {r: _number(use.get(r, ZERO)) for r in ("gpu", "cpu", "memory")}
            f["used"]["gpu"] = int(f["used"]["gpu"] or 0)
            # Free GPUs by the one rule the dashboard and the wait gap read too
            # (`scheduling.selectors.cluster_gpus` applies it to the same rows).
            f["free"] = gpus_free(f["allocatable"]["gpu"], f["used"]["gpu"])
            for part in ("capacity", "allocatable"):
                f[part]["cpu"] = _number(f[part]["cpu"])
                f[part]["memory"] = _number(f[part]["memory"])
            # Health per flavor: the cluster's score scaled by the share of ready nodes.
            f["health"] = round(cluster.health * f["ready_nodes"] / f["nodes"], 3)
        item: dict[str, Any] = {
            "name": cluster.name,
            "region": cluster.region,
            "kind": cluster.kind,
            "backend": cluster.backend,
            "health": cluster.health,
            "price": cluster.price,
            "datasets": cluster.datasets,
            "enabled": cluster.enabled,
            "workload_kinds": list(cluster.kinds or []),
            "flavors": dict(sorted(flavors.items())),
        }
        if name is not None:
            item["nodes"] = [
                {
                    "name": n.name, "flavor": n.flavor.name, "gpus": n.gpus,
                    "cpu": _number(n.cpu), "memory_gib": _number(n.memory_gib),
                    "rack": n.rack, "ready": n.ready, "labels": n.labels,
                }
                for n in by_cluster[cluster.pk]
            ]
        out.append(item)
    return out
