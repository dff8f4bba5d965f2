"""The variables rules read (request, queue, team, cost_center, fleet, now), built from the DB.

docs/policies.md documents every field. Numbers are plain int/float (CEL does not take
Decimal); GPU counts are ints. An unlimited max is written as the fleet's installed capacity
for the key (that is what unlimited means, QUOTA-SEMANTICS §2), so rules can compare it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.apps import apps
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from quotas.models import Queue, QuotaEntry, Team

from .models import TeamApproval

logger = logging.getLogger(__name__)

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


EMPTY_COST_CENTER: dict[str, Any] = {
    "name": "", "currency": "", "budget": 0.0, "spent": 0.0, "forecast": 0.0,
    "remaining": 0.0, "over_budget": False,
}


_UNREAD = object()


def cost_center_variables(
    team: Team | None, *, now: datetime | None = None, cost_center: Any = _UNREAD,
) -> dict[str, Any]:
    """`cost_center` from billing when billing is there, else empty values.

    Uses `billing.selectors.cost_center_summary(team=...)` if billing provides it; otherwise
    billing's cost center of the team (`cost_center_of`), its active budget (monthly first)
    with `budget_forecast` (spent this period and the forecast at its end), or, without a
    budget, the cost center's ledger this month (`spent_in`). Money becomes float for CEL.
    `cost_center`: the team's cost center (or None) already read (`submission_rows`).
    """
    if team is None:
        return dict(EMPTY_COST_CENTER)
    try:
        from billing import selectors as billing_selectors  # noqa: PLC0415
    except ImportError:
        return dict(EMPTY_COST_CENTER)
    try:
        summary = _billing_summary(billing_selectors, team, now or timezone.now(), cost_center)
    except Exception:  # billing is optional here: its failure must not block every submission
        logger.exception("cost center of team %s could not be read from billing", team)
        return dict(EMPTY_COST_CENTER)
    if not summary:
        return dict(EMPTY_COST_CENTER)
    out: dict[str, Any] = dict(EMPTY_COST_CENTER)
    for field in ("name", "currency"):
        out[field] = str(summary.get(field, "") or "")
    for field in ("budget", "spent", "forecast"):
        out[field] = float(summary.get(field) or 0)
    out["remaining"] = out["budget"] - out["spent"]
    out["over_budget"] = bool(out["budget"]) and out["spent"] >= out["budget"]
    return out


def _billing_summary(
    billing_selectors: Any, team: Team, now: datetime, cost_center: Any = _UNREAD,
) -> dict[str, Any] | None:
    summary_fn = getattr(billing_selectors, "cost_center_summary", None)
    if summary_fn is not None:
        return summary_fn(team=team)
    cost_center_of = getattr(billing_selectors, "cost_center_of", None)
    if cost_center_of is None:
        return None
    cc = cost_center_of(team) if cost_center is _UNREAD else cost_center
    if cc is None:
        return None
    out: dict[str, Any] = {"name": cc.code, "currency": cc.currency}
    budget = cc.budgets.filter(active=True).order_by("period").first() if hasattr(
        cc, "budgets") else None
    forecast_fn = getattr(billing_selectors, "budget_forecast", None)
    if budget is not None and forecast_fn is not None:
        f = forecast_fn(budget, now)
        out.update(budget=budget.amount, spent=f["spent"], forecast=f["forecast"])
        return out
    from billing.services import budgets as billing_budgets  # noqa: PLC0415

    start, end = billing_budgets.period_bounds("monthly", now)
    spent = billing_budgets.spent_in(cc.pk, start, end)
    out.update(budget=0, spent=spent, forecast=spent)
    return out


def _usage_by_leaf() -> dict[str, dict[str, float]]:
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
    usage = usage_by_leaf if usage_by_leaf is not None else _usage_by_leaf()
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


def _with_ancestors(paths: Iterable[str]) -> set[str]:
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
    paths = _with_ancestors(wanted)
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


def _table(app_model: str) -> str:
    return connection.ops.quote_name(apps.get_model(app_model)._meta.db_table)


POLICY_STAMP_SQL = (
    "SELECT COUNT(*)::text || ':' || COALESCE(SUM(version), 0)::text || ':' || "
    "COALESCE(MAX(updated_at)::text, '') || ':' || COALESCE(MAX(id), 0)::text FROM {table}"
)


def policy_stamp() -> str | None:
    """A stamp of the policies table that changes with every saved change (count, versions,
    last change, last id): read by every submission, so a change made in any process takes
    effect on the next one. None off PostgreSQL."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(POLICY_STAMP_SQL.format(table=_table("policies.Policy")))
        return cursor.fetchone()[0]


# The pieces `context_rows` can read; a submission's context needs some of them.
PARTS = ("usage", "capacity", "clusters", "entries", "team", "cost_center")


def parts_for(needed: set[str], team: Team | None) -> set[str]:
    """The pieces the variables in `needed` are built from."""
    parts: set[str] = set()
    if needed & {"queue", "fleet"}:
        parts |= {"usage", "capacity", "clusters"}
    if "queue" in needed:
        parts.add("entries")
    if team is not None and "team" in needed:
        parts.add("team")
    if team is not None and "cost_center" in needed and _cost_center_branch(team) is not None:
        parts.add("cost_center")
    return parts


def submission_rows(
    *, queue: Queue, team: Team | None, needed: set[str], now: datetime, stamp: bool = False,
) -> dict[str, Any] | None:
    """What a submission's `queue`, `team` and `fleet` read, in ONE query (PostgreSQL).

    Open admissions per leaf and key, installed capacity per flavor, the enabled clusters, the
    quota entries of the queue and its ancestors, the team's unexpired approvals and its
    department, the team's cost center, and with `stamp` the policy stamp (`policy_stamp`),
    as tagged rows of one UNION ALL: each piece is as fresh as a query of its own, for one
    round trip instead of nine. None on other databases (the ORM queries are used there).
    """
    rows = context_rows(parts=parts_for(needed, team), queue=queue, team=team, stamp=stamp)
    if rows is not None and "approvals" in rows:
        cutoff = now.timestamp()
        rows["approvals"] = [name for name, expires in rows["approvals"]
                             if expires is None or expires > cutoff]
    return rows


def context_rows(
    *, parts: set[str], queue: Queue, team: Team | None, stamp: bool = False,
) -> dict[str, Any] | None:
    """The `parts` (see PARTS) of a submission's context, as tagged rows of one UNION ALL.

    Approvals come with their expiry (epoch seconds or None), so they can be kept and filtered
    by the time of each use. None on other databases, or when there is nothing to read.
    """
    if connection.vendor != "postgresql":
        return None
    admission, workload, q_t, flavor = (_table("scheduling.Admission"),
                                       _table("scheduling.Workload"), _table("quotas.Queue"),
                                       _table("quotas.Flavor"))
    node, cluster, entry, approval = (_table("scheduling.Node"), _table("scheduling.Cluster"),
                                      _table("quotas.QuotaEntry"),
                                      _table("policies.TeamApproval"))
    # Typed NULLs: every branch of the UNION ALL has the same column types.
    T, N = "NULL::text", "NULL::numeric"  # noqa: N806
    sql_parts: list[str] = []
    params: list[Any] = []
    if "usage" in parts:
        sql_parts.append(
            f"SELECT 'u', q.path, f.name, {T}, SUM(a.gpus), SUM(a.cpu), SUM(a.memory_gib) "
            f"FROM {admission} a JOIN {workload} w ON w.id = a.workload_id "
            f"JOIN {q_t} q ON q.id = w.queue_id JOIN {flavor} f ON f.id = a.flavor_id "
            f"WHERE a.ended_at IS NULL GROUP BY q.path, f.name")
    if "capacity" in parts:
        sql_parts.append(
            f"SELECT 'n', f.name, {T}, {T}, SUM(n.gpus), SUM(n.cpu), SUM(n.memory_gib) "
            f"FROM {node} n JOIN {cluster} c ON c.id = n.cluster_id "
            f"JOIN {flavor} f ON f.id = n.flavor_id WHERE n.ready AND c.enabled GROUP BY f.name")
    if "clusters" in parts:
        sql_parts.append(
            f"SELECT 'c', c.name, c.region, c.kind, c.health, {N}, {N} FROM {cluster} c "
            f"WHERE c.enabled")
    if "entries" in parts:
        sql_parts.append(
            f"SELECT 'q', q.path, f.name, e.resource, {N}, e.min, e.max FROM {entry} e "
            f"JOIN {q_t} q ON q.id = e.queue_id JOIN {flavor} f ON f.id = e.flavor_id "
            f"WHERE q.path = ANY(%s)")
        params.append(sorted(_with_ancestors([queue.path])))
    if "team" in parts and team is not None:
        sql_parts.append(
            f"SELECT 'a', t.name, {T}, {T}, EXTRACT(EPOCH FROM t.expires_at), {N}, {N} "
            f"FROM {approval} t WHERE t.team_id = %s")
        params.append(team.pk)
        sql_parts.append(f"SELECT 'd', q.path, {T}, {T}, {N}, {N}, {N} FROM {q_t} q "
                         f"WHERE q.id = %s")
        params.append(team.department_id)
    cost_center = _cost_center_branch(team) if "cost_center" in parts else None
    if cost_center is not None:
        sql_parts.append(cost_center[0])
        params.append(team.pk if team is not None else None)
    if stamp:
        sql_parts.append(POLICY_STAMP_SQL.format(table=_table("policies.Policy")).replace(
            "SELECT ", "SELECT 's', ", 1).replace(
            " FROM ", " AS s1, NULL::text, NULL::text, NULL::numeric, NULL::numeric, "
            "NULL::numeric FROM ", 1))
    if not sql_parts:
        return None
    out: dict[str, Any] = {}
    if "usage" in parts:
        out["usage"] = defaultdict(lambda: defaultdict(float))
    for name, key in (("capacity", "capacity"), ("clusters", "clusters"),
                      ("entries", "entries")):
        if name in parts:
            out[key] = []
    if "team" in parts and team is not None:
        out["approvals"], out["department"] = [], ""
    from core.changes import fetch_prepared  # noqa: PLC0415

    # Prepared: the few shapes of this query are planned once per connection.
    rows = fetch_prepared(" UNION ALL ".join(sql_parts), params)
    cost_centers: list[tuple[Any, ...]] = []
    for tag, s1, s2, s3, n1, n2, n3 in rows:
        if tag == "u":
            for resource, value in zip(RESOURCES, (n1, n2, n3), strict=True):
                out["usage"][s1][f"{s2}/{resource}"] += float(value or 0)
        elif tag == "n":
            out["capacity"].append({"flavor__name": s1, "gpu": n1, "cpu": n2, "memory": n3})
        elif tag == "c":
            out["clusters"].append({"name": s1, "region": s2, "kind": s3, "health": float(n1)})
        elif tag == "q":
            out["entries"].append({"queue__path": s1, "flavor__name": s2, "resource": s3,
                                   "min": n2, "max": n3})
        elif tag == "a":
            out["approvals"].append((s1, float(n1) if n1 is not None else None))
        elif tag == "d":
            out["department"] = s1 or ""
        elif tag == "k":
            cost_centers.append((n2, n1, s1, s2))
        elif tag == "s":
            out["stamp"] = s1
    if "clusters" in out:
        out["clusters"].sort(key=lambda c: c["name"])
    if cost_center is not None:
        # billing's cost_center_of: the team's own cost center, else the default one.
        out["cost_center"] = None
        if cost_centers:
            _, pk, code, currency = min(cost_centers)
            out["cost_center"] = cost_center[1](id=int(pk), code=code, currency=currency)
    return out


def _cost_center_branch(team: Team | None) -> tuple[str, Any] | None:
    """The UNION ALL branch reading the team's cost center the way billing's `cost_center_of`
    does, or None when billing is absent or summarises cost centers itself."""
    try:
        cost_center = apps.get_model("billing", "CostCenter")
        apps.get_model("billing", "TeamCostCenter")
        from billing import selectors as billing_selectors  # noqa: PLC0415
    except (LookupError, ImportError):
        return None
    if team is None or hasattr(billing_selectors, "cost_center_summary") or not hasattr(
            billing_selectors, "cost_center_of"):
        return None
    cc, tcc = _table("billing.CostCenter"), _table("billing.TeamCostCenter")
    sql = (f"SELECT 'k', cc.code, cc.currency, NULL::text, cc.id, "
           f"CASE WHEN l.id IS NULL THEN 1 ELSE 0 END, NULL::numeric FROM {cc} cc "
           f"LEFT JOIN {tcc} l ON l.cost_center_id = cc.id AND l.team_id = %s "
           f"WHERE l.id IS NOT NULL OR cc.is_default")
    return sql, cost_center


def submission_variables(
    *, data: Mapping[str, Any], queue: Queue, team: Team | None, user: Any,
    is_update: bool = False, now: datetime | None = None, needs: Iterable[str] | None = None,
    rows: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """All six variables for one submission (`rows`: `submission_rows` already read).

    `needs`: the variables the policies read; the others get neutral values without a query.
    The fleet, the quota tree and the team are read in one query (`submission_rows`);
    billing's cost center in its own.
    """
    now = now or timezone.now()
    needed = set(needs) if needs is not None else {"queue", "team", "cost_center", "fleet"}
    if rows is None:
        rows = submission_rows(queue=queue, team=team, needed=needed, now=now)
    if rows is None:
        rows = {}
        if needed & {"queue", "fleet"}:
            rows["usage"] = _usage_by_leaf()
    usage = rows.get("usage", {})
    fleet = fleet_variables(usage, capacity_rows=rows.get("capacity"),
                            cluster_rows=rows.get("clusters")) if needed & {"queue", "fleet"} \
        else EMPTY_FLEET
    username = user.get_username() if user is not None and hasattr(user, "get_username") else ""
    return {
        "request": request_variables(
            data, queue_path=queue.path, team=team.name if team else "", user=username,
            is_update=is_update,
        ),
        "queue": queue_variables_many([queue], fleet=fleet, usage_by_leaf=usage,
                                      entry_rows=rows.get("entries"))[queue.path]
        if "queue" in needed else {**EMPTY_QUEUE, "path": queue.path, "name": queue.name},
        "team": team_variables(team, now=now, approvals=rows.get("approvals"),
                               department=rows.get("department")) if "team" in needed else {
            **EMPTY_TEAM, "name": team.name if team else ""},
        "cost_center": cost_center_variables(
            team, now=now, cost_center=rows.get("cost_center", _UNREAD))
        if "cost_center" in needed
        else dict(EMPTY_COST_CENTER),
        "fleet": fleet,
        "now": now_variables(now),
    }


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


# Where each piece is cached (changes.View): its topic and key.
_CONFIG_USAGE = frozenset({"config", "usage"})


def _part_key(part: str, queue: Queue, team: Team | None) -> tuple[str, tuple[Any, ...]]:
    if part == "usage":
        return "usage", ("usage",)
    if part in ("capacity", "clusters"):
        return "config", (part,)
    if part == "entries":
        return "config", ("entries", queue.path)
    return "config", (part, team.pk if team is not None else None)


def cached_submission_variables(
    view: Any, *, data: Mapping[str, Any], queue: Queue, team: Team | None, user: Any,
    is_update: bool = False, now: datetime, needs: Iterable[str],
) -> dict[str, Any]:
    """`submission_variables` from the pieces cached in `view` (a `changes.View`, validated
    against the change log this submission): only the pieces not cached, or written since, are
    read, in one query; with nothing changed, none. Equal to `submission_variables`.
    """
    needed = set(needs)
    parts = parts_for(needed, team)
    missing = {p for p in parts if not view.has(*_part_key(p, queue, team))}
    fresh: dict[str, Any] = {}
    if missing:
        rows = context_rows(parts=missing, queue=queue, team=team) or {}
        for p in missing:
            value = (rows.get("approvals", []), rows.get("department", "")) if p == "team" \
                else rows.get(p)
            fresh[p] = value
            view.put(*_part_key(p, queue, team), value)

    def part(p: str) -> Any:
        if p in fresh:
            return fresh[p]
        topic, key = _part_key(p, queue, team)
        return view.store.parts[topic][key]

    fleet: dict[str, Any] = EMPTY_FLEET
    usage: Mapping[str, Any] = {}
    if needed & {"queue", "fleet"}:
        usage = part("usage")
        fleet = view.derive(("fleet",), _CONFIG_USAGE, lambda: fleet_variables(
            usage, capacity_rows=part("capacity"), cluster_rows=part("clusters")))
    if "queue" in needed:
        queue_vars = view.derive(("queue", queue.path), _CONFIG_USAGE, lambda: (
            queue_variables_many([queue], fleet=fleet, usage_by_leaf=usage,
                                 entry_rows=part("entries"))[queue.path]))
    else:
        queue_vars = {**EMPTY_QUEUE, "path": queue.path, "name": queue.name}
    if "team" in needed and team is not None:
        approvals, department = part("team")
        cutoff = now.timestamp()
        team_vars = team_variables(
            team, now=now, department=department,
            approvals=[n for n, expires in approvals if expires is None or expires > cutoff])
    else:
        team_vars = {**EMPTY_TEAM, "name": team.name if team else ""}
    if "cost_center" in needed:
        cost_center = cost_center_variables(
            team, now=now, cost_center=part("cost_center") if "cost_center" in parts
            else _UNREAD)
    else:
        cost_center = dict(EMPTY_COST_CENTER)
    username = user.get_username() if user is not None and hasattr(user, "get_username") else ""
    return {
        "request": request_variables(
            data, queue_path=queue.path, team=team.name if team else "", user=username,
            is_update=is_update,
        ),
        "queue": queue_vars,
        "team": team_vars,
        "cost_center": cost_center,
        "fleet": fleet,
        "now": now_variables(now),
    }
