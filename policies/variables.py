"""The variables rules read (request, queue, team, fleet, now), each built from the DB or
from rows already read, and their neutral values.

docs/policies.md documents every field. Numbers are plain int/float (CEL does not take
Decimal); GPU counts are ints. An unlimited max is written as the fleet's installed capacity
for the key (that is what unlimited means, QUOTA-SEMANTICS §2), so rules can compare it.
`cost_center` comes from billing (`cost_center`); the six of one submission: `context`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.apps import apps
from django.db.models import Sum
from django.utils import timezone

from quotas.models import Queue, QuotaEntry, Team

from .cost_center import EMPTY_COST_CENTER
from .models import TeamApproval

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
RESOURCES = ("gpu", "cpu", "memory")


def _num(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def now_variables(now: datetime) -> dict[str, Any]:
    """`now`: the time, weekday (0 = Monday, and its name), hour and minute, in UTC."""
    now = now.astimezone(UTC)
    return {
        "time": now, "iso": now.isoformat(), "date": now.date().isoformat(),
        "weekday": now.weekday(), "day": WEEKDAYS[now.weekday()], "hour": now.hour,
        "minute": now.minute, "weekend": now.weekday() >= 5,
    }


def request_variables(
    data: Mapping[str, Any], *, queue_path: str = "", team: str = "", user: str = "",
    is_update: bool = False,
) -> dict[str, Any]:
    """`request` from a submission (the API's input shape) or a recorded workload."""
    pods = list(data.get("pods") or data.get("pod_sets") or [])
    flavors: list[str] = []
    gpus = count = 0
    cpu = memory = 0.0
    gpu_memory = 0
    for pod in pods:
        n = int(pod.get("count", 1) or 0)
        count += n
        gpus += n * int(pod.get("gpus", 0) or 0)
        cpu += n * float(pod.get("cpu", 0) or 0)
        memory += n * float(pod.get("memory_gib", 0) or 0)
        gpu_memory = max(gpu_memory, int(pod.get("gpu_memory_gib") or 0))
        for flavor in pod.get("flavors") or []:
            if flavor not in flavors:
                flavors.append(str(flavor))
    queue = data.get("queue", queue_path)
    if not isinstance(queue, str):
        queue = getattr(queue, "path", str(queue))
    priority = data.get("priority_class") or ""
    if not isinstance(priority, str):
        priority = getattr(priority, "name", str(priority))
    return {
        "name": str(data.get("name", "")),
        "queue": queue or queue_path,
        "team": team,
        "user": user,
        "flavors": flavors,
        "gpus": gpus,
        "pods": count,
        "cpu": cpu,
        "memory_gib": memory,
        "gpu_memory_gib": gpu_memory,
        "priority_class": priority,
        "preemptible": bool(data.get("preemptible", True)),
        "checkpoint": bool(data.get("checkpoint", True)),
        "dataset": str(data.get("dataset", "") or ""),
        "image": str(data.get("image", "") or ""),
        "labels": {str(k): str(v) for k, v in (data.get("labels") or {}).items()},
        "duration_s": int(data.get("duration_hint_s") or data.get("duration_s") or 0),
        "is_update": bool(is_update),
        "interactive": data.get("interactive") is True,  # a session (notebook)
        "pod_sets": [
            {"count": int(p.get("count", 1) or 0), "gpus": int(p.get("gpus", 0) or 0),
             "flavors": list(p.get("flavors") or []), "cpu": float(p.get("cpu", 0) or 0),
             "memory_gib": float(p.get("memory_gib", 0) or 0)}
            for p in pods
        ],
    }


def workload_request_variables(workload: Any) -> dict[str, Any]:
    """`request` for a stored workload (replay; placement in the cycle)."""
    data = {
        "name": workload.name,
        "priority_class": workload.priority_class.name if workload.priority_class_id else "",
        "preemptible": workload.preemptible,
        "checkpoint": workload.checkpoint,
        "dataset": workload.dataset,
        "image": workload.image,
        "labels": workload.labels or {},
        "duration_hint_s": workload.duration_hint_s or 0,
        "interactive": bool(workload.interactive),
        "pods": [
            {"count": ps.count, "gpus": ps.gpus, "flavors": ps.flavors, "cpu": ps.cpu,
             "memory_gib": ps.memory_gib, "gpu_memory_gib": ps.gpu_memory_gib}
            for ps in workload.pod_sets.all()
        ],
    }
    return request_variables(
        data, queue_path=workload.queue.path, team=workload.team.name if workload.team else "",
        user=workload.owner.get_username() if workload.owner_id else "",
    )


def team_variables(
    team: Team | None, *, now: datetime | None = None,
    approvals: Iterable[str] | None = None, department: str | None = None,
) -> dict[str, Any]:
    """`team`: its name, department and the approvals it holds (expired ones left out).

    `approvals` (unexpired names) and `department` (path): the same values already read.
    """
    if team is None:
        return {"name": "", "display_name": "", "department": "", "approvals": []}
    now = now or timezone.now()
    if approvals is None:
        approvals = [
            a.name for a in TeamApproval.objects.filter(team=team).only("name", "expires_at")
            if a.expires_at is None or a.expires_at > now
        ]
    if department is None:
        department = Queue.objects.filter(pk=team.department_id).values_list(
            "path", flat=True).first() or "" if team.department_id else ""
    return {"name": team.name, "display_name": team.display_name or team.name,
            "department": department, "approvals": sorted(approvals)}


def admitted_usage_by_leaf() -> dict[str, dict[str, float]]:
    """Admitted (open admission) usage per leaf path and key, from the workers' models."""
    try:
        admission = apps.get_model("scheduling", "Admission")
    except LookupError:
        return {}
    rows = (
        admission.objects.filter(ended_at__isnull=True)
        .values("workload__queue__path", "flavor__name")
        .annotate(gpu=Sum("gpus"), cpu=Sum("cpu"), memory=Sum("memory_gib"))
    )
    usage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for values in rows:
        row: dict[str, Any] = dict(values)
        path, flavor = row["workload__queue__path"], row["flavor__name"]
        for resource in RESOURCES:
            usage[path][f"{flavor}/{resource}"] += float(row[resource] or 0)
    return usage


def fleet_variables(
    usage_by_leaf: Mapping[str, Mapping[str, float]] | None = None,
    *,
    capacity_rows: Iterable[Mapping[str, Any]] | None = None,
    cluster_rows: Iterable[Mapping[str, Any]] | None = None,
) -> dict:
    """`fleet`: installed capacity (enabled clusters, ready nodes), used and utilisation per
    flavor (GPU flavors in cards, CPU-only flavors in cores), the clusters and the regions.

    `capacity_rows` and `cluster_rows`: the same rows already read (`submission_rows`).
    """
    from scheduling.models import Cluster, Node  # noqa: PLC0415

    capacity: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rows = capacity_rows if capacity_rows is not None else (
        Node.objects.filter(ready=True, cluster__enabled=True)
        .values("flavor__name").annotate(gpu=Sum("gpus"), cpu=Sum("cpu"), memory=Sum("memory_gib"))
    )
    for values in rows:
        row: dict[str, Any] = dict(values)
        for resource in RESOURCES:
            capacity[row["flavor__name"]][resource] = float(row[resource] or 0)
    usage = usage_by_leaf if usage_by_leaf is not None else admitted_usage_by_leaf()
    used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for per_key in usage.values():
        for key, value in per_key.items():
            flavor, resource = key.split("/", 1)
            used[flavor][resource] += value
    flavors = sorted(set(capacity) | set(used))
    cap_main: dict[str, Any] = {}
    used_main: dict[str, Any] = {}
    utilisation: dict[str, float] = {}
    for flavor in flavors:
        main = "gpu" if capacity[flavor]["gpu"] or used[flavor]["gpu"] else "cpu"
        cap = capacity[flavor][main]
        use = used[flavor][main]
        cap_main[flavor] = int(cap) if main == "gpu" else cap
        used_main[flavor] = int(use) if main == "gpu" else use
        utilisation[flavor] = (use / cap) if cap else (1.0 if use else 0.0)
    clusters = list(cluster_rows) if cluster_rows is not None else [
        {"name": c.name, "region": c.region, "kind": c.kind, "health": c.health}
        for c in Cluster.objects.filter(enabled=True).only("name", "region", "kind", "health")
    ]
    return {
        "capacity": cap_main,
        "used": used_main,
        "utilisation": utilisation,
        "resources": {
            f: {r: {"capacity": capacity[f][r], "used": used[f][r]} for r in RESOURCES}
            for f in flavors
        },
        "clusters": clusters,
        "regions": sorted({c["region"] for c in clusters if c["region"]}),
    }


def _fleet_capacity_by_key(fleet: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for flavor, per in fleet.get("resources", {}).items():
        for resource, numbers in per.items():
            out[f"{flavor}/{resource}"] = numbers["capacity"]
    return out


def with_ancestors(paths: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for path in paths:
        parts = path.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def queue_variables_many(
    queues: Iterable[Queue],
    *,
    fleet: Mapping[str, Any],
    usage_by_leaf: Mapping[str, Mapping[str, float]],
    entry_rows: Iterable[Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """`queue` for each of `queues` (their ancestors are loaded too, to resolve defaults).

    `entry_rows`: the quota entries of the queues and their ancestors, already read.
    """
    wanted = {q.path for q in queues}
    paths = with_ancestors(wanted)
    entries: dict[str, dict[str, tuple[Any, Any]]] = defaultdict(dict)
    for e in entry_rows if entry_rows is not None else QuotaEntry.objects.filter(
        queue__path__in=paths
    ).values("queue__path", "flavor__name", "resource", "min", "max"):
        entries[e["queue__path"]][f"{e['flavor__name']}/{e['resource']}"] = (
            _num(e["min"]), _num(e["max"]))
    keys = sorted({k for per in entries.values() for k in per})
    capacity = _fleet_capacity_by_key(fleet)
    resolved: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for path in sorted(paths, key=lambda p: p.count("/")):
        parent = path.rsplit("/", 1)[0] if "/" in path else None
        pmax = resolved[parent][1] if parent in resolved else {}
        mins, maxes = {}, {}
        for key in keys:
            qmin, qmax = entries[path].get(key, (None, None))
            mins[key] = qmin if qmin is not None else 0
            maxes[key] = qmax if qmax is not None else pmax.get(key)
        resolved[path] = (mins, maxes)
    used_tree: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for leaf, per in usage_by_leaf.items():
        parts = leaf.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if prefix in wanted:
                for key, value in per.items():
                    used_tree[prefix][key] += value
    out = {}
    for q in queues:
        mins, maxes = resolved[q.path]
        all_keys = sorted(set(keys) | set(used_tree[q.path]))
        out[q.path] = {
            "path": q.path, "name": q.name, "depth": q.path.count("/") + 1,
            "parent": q.path.rsplit("/", 1)[0] if "/" in q.path else "",
            "min": {k: mins.get(k, 0) for k in all_keys},
            "max": {k: maxes[k] if maxes.get(k) is not None else capacity.get(k, 0)
                    for k in all_keys},
            "unlimited": [k for k in all_keys if maxes.get(k) is None],
            "used": {k: _int_if_whole(used_tree[q.path].get(k, 0)) for k in all_keys},
        }
    return out


def _int_if_whole(value: float) -> Any:
    return int(value) if float(value).is_integer() else value


EMPTY_REQUEST = request_variables({})
EMPTY_QUEUE = {"path": "", "name": "", "depth": 0, "parent": "", "min": {}, "max": {},
               "unlimited": [], "used": {}}
EMPTY_TEAM = {"name": "", "display_name": "", "department": "", "approvals": []}
EMPTY_FLEET: dict[str, Any] = {"capacity": {}, "used": {}, "utilisation": {}, "resources": {},
                               "clusters": [], "regions": []}


def sample_variables(now: datetime | None = None) -> dict[str, Any]:
    """A complete context with neutral values: the base that test cases and the "try it" box
    override (a deep merge), so a case only writes what it is about."""
    return {
        "request": dict(EMPTY_REQUEST),
        "queue": dict(EMPTY_QUEUE),
        "team": dict(EMPTY_TEAM),
        "cost_center": dict(EMPTY_COST_CENTER),
        "fleet": {k: (dict(v) if isinstance(v, dict) else list(v))
                  for k, v in EMPTY_FLEET.items()},
        "now": now_variables(now or timezone.now()),
    }


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` laid over it, maps merged key by key, other values replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
