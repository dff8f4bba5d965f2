"""What a submission's context reads, in one query (PostgreSQL): the open admissions, the
installed capacity, the clusters, the quota entries of the queue and its ancestors, the team's
approvals, department and cost center, as tagged rows of one UNION ALL; and the stamp of the
policies table.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import connection

from core import db
from quotas.models import Queue, Team

from .variables import RESOURCES, with_ancestors


def _table(app_model: str) -> str:
    return connection.ops.quote_name(apps.get_model(app_model)._meta.db_table)


POLICY_STAMP_SQL = (
    "SELECT COUNT(*)::text || ':' || COALESCE(SUM(version), 0)::text || ':' || "
    "COALESCE(MAX(updated_at)::text, '') || ':' || COALESCE(MAX(id), 0)::text FROM {table}"
)


def policy_stamp() -> str | None:
    """A stamp of the policies table that changes with every saved change (count, versions,
    last change, last id): read by each check when there is no change log to rely on, so a
    change made in any process takes effect on the next one. None off PostgreSQL."""
    if not db.postgres():
        return None
    with connection.cursor() as cursor:
        cursor.execute(POLICY_STAMP_SQL.format(table=_table("policies.Policy")))
        return cursor.fetchone()[0]


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
    *, queue: Queue, team: Team | None, needed: set[str], now: datetime,
) -> dict[str, Any] | None:
    """What a submission's `queue`, `team` and `fleet` read, in ONE query (PostgreSQL).

    Open admissions per leaf and key, installed capacity per flavor, the enabled clusters, the
    quota entries of the queue and its ancestors, the team's unexpired approvals and its
    department and the team's cost center, as tagged rows of one UNION ALL: each piece is as
    fresh as a query of its own, for one round trip instead of one per piece. None on other
    databases (the ORM queries are used there).
    """
    rows = context_rows(parts=parts_for(needed, team), queue=queue, team=team)
    if rows is not None and "approvals" in rows:
        cutoff = now.timestamp()
        rows["approvals"] = [name for name, expires in rows["approvals"]
                             if expires is None or expires > cutoff]
    return rows


def context_rows(
    *, parts: set[str], queue: Queue, team: Team | None,
) -> dict[str, Any] | None:
    """The `parts` of a submission's context (usage, capacity, clusters, entries, team,
    cost_center: see `parts_for`), as tagged rows of one UNION ALL.

    Approvals come with their expiry (epoch seconds or None), so they can be kept and filtered
    by the time of each use. None on other databases, or when there is nothing to read.
    """
    if not db.postgres():
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
        params.append(sorted(with_ancestors([queue.path])))
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
