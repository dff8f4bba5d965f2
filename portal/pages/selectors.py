"""Reads behind the portal pages: dashboard rows, fleet headroom, time series for charts.

Every function returns plain data (dicts, lists, numbers); the chart code never queries.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Min, Q

from core.db import postgres
from portal.pages.access import Scope
from quotas.selectors import queue_rows
from scheduling.models import ACTIVE_STATES, Admission, Cluster, Node, Workload, WorkloadState
from scheduling.selectors import gpu_headroom, pending_counts

ZERO = Decimal(0)


def _bar(cell: dict[str, Any]) -> dict[str, Any]:
    """Widths (percent of the bar's scale) for the used-within-min, borrowed and lent parts."""
    qmin, qmax = cell["min"] or ZERO, cell["max"]
    used, lent = cell["used"], cell["lent"]
    scale = max(qmax if qmax is not None else ZERO, qmin, used + lent, Decimal(1))
    within = min(used, qmin)
    borrowed = max(ZERO, used - qmin)

    def pct(v: Decimal) -> float:
        return round(float(v / scale * 100), 2)

    return {"guaranteed": pct(within), "borrowed": pct(borrowed), "lent": pct(lent),
            "min_at": pct(qmin), "scale": scale}


def dashboard_queues(*, user: Any, scope: Scope) -> list[dict[str, Any]]:
    """The leaf queues of the user's teams, with per-GPU-model used/min/max and a bar; for a
    platform admin in no team, the top-level queues (the whole tree is on the tree page).

    Usage comes with the tree rows (`quotas.selectors.quota_usage`): computed once per page.
    """
    tree = queue_rows(user=user)
    mine = [r for r in tree if r["can_submit"]]
    if not mine and scope.is_admin:
        mine = [r for r in tree if r["depth"] == 1]
    rows = []
    for row in mine:
        keys = []
        for flavor, resources in row["quota"].items():
            cell = resources.get("gpu")
            if cell is None:
                continue
            full = {
                "flavor": flavor, "min": cell["min"], "max": cell["max"],
                "lendable": cell["lendable"],
                **{f: cell.get(f) or ZERO for f in ("used", "borrowed", "lent", "pending")},
            }
            full["bar"] = _bar(full)
            keys.append(full)
        rows.append({"id": row["id"], "path": row["path"], "keys": keys,
                     "can_submit": row["can_submit"]})
    return rows


def workloads_to_decide(scope: Scope, *, user: Any = None) -> Any:
    """Pending workloads held for approval that the user may decide, oldest first; with
    `user`, not their own nor those they already approved (four eyes)."""
    from django.db.models import Exists, OuterRef

    from scheduling.models import EventCode, WorkloadEvent

    qs = Workload.objects.filter(needs_approval=True, state=WorkloadState.PENDING)
    if not scope.is_admin:
        qs = qs.filter(queue_id__in=scope.decide_queue_ids)
    if user is not None:
        qs = qs.exclude(owner_id=user.pk).exclude(Exists(WorkloadEvent.objects.filter(
            workload_id=OuterRef("pk"), code=EventCode.APPROVAL_GIVEN, actor_id=user.pk)))
    return (qs.select_related("queue", "owner", "priority_class").prefetch_related("pod_sets")
            .order_by("submitted_at", "id"))


def my_live_workloads(*, user: Any, limit: int = 20) -> list[Workload]:
    """The user's own running and waiting workloads, newest first."""
    live = [WorkloadState.PENDING, *ACTIVE_STATES]
    return list(
        Workload.objects.filter(owner=user, state__in=live)
        .select_related("queue", "priority_class", "estimate").prefetch_related("pod_sets")
        .order_by("-submitted_at", "-id")[:limit]
    )


def fleet_headroom(*, min_health: float | None = None) -> list[dict[str, Any]]:
    """Per GPU model: installed, usable, used, free (`scheduling.selectors.gpu_headroom`, the
    one source of free GPUs), as rows for the dashboard."""
    return [{"flavor": flavor, **row}
            for flavor, row in sorted(gpu_headroom(min_health=min_health).items())]


# --- time series ------------------------------------------------------------------------------


def _buckets(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    out, t = [], start
    while t < end:
        out.append(t)
        t += step
    return out


def _spread(intervals: list[tuple[datetime, datetime | None, float]], start: datetime,
            end: datetime, step: timedelta) -> list[float]:
    """Average amount held per bucket (amount x overlap / bucket length)."""
    buckets = _buckets(start, end, step)
    values = [0.0] * len(buckets)
    span = step.total_seconds()
    for a_start, a_end, amount in intervals:
        lo, hi = max(a_start, start), min(a_end or end, end)
        if hi <= lo:
            continue
        first = int((lo - start) / step)
        last = min(len(buckets) - 1, int((hi - start) / step))
        for i in range(first, last + 1):
            b_lo, b_hi = buckets[i], buckets[i] + step
            overlap = (min(hi, b_hi) - max(lo, b_lo)).total_seconds()
            if overlap > 0:
                values[i] += amount * overlap / span
    return values


def _admissions(start: datetime, end: datetime, extra: Q) -> Any:
    return Admission.objects.filter(
        Q(reserved_at__lt=end) & (Q(ended_at__isnull=True) | Q(ended_at__gt=start)) & extra
    )


def queue_usage_intervals(*, path: str, start: datetime, end: datetime
                          ) -> dict[str, list[tuple[datetime, datetime | None, float]]]:
    """Admission intervals (reserved, ended, GPUs) of a queue's subtree overlapping a window,
    per flavor: one query serves every chart of the queue page (shorter windows included)."""
    extra = Q(workload__queue__path=path) | Q(workload__queue__path__startswith=f"{path}/")
    rows = _admissions(start, end, extra).values_list("flavor__name", "reserved_at", "ended_at",
                                                      "gpus")
    out: dict[str, list[tuple[datetime, datetime | None, float]]] = defaultdict(list)
    for flavor, s, e, g in rows:
        out[flavor].append((s, e, float(g)))
    return dict(out)


def usage_series(intervals: list[tuple[datetime, datetime | None, float]], *, start: datetime,
                 end: datetime, step: timedelta) -> dict[str, Any]:
    """GPUs held per bucket (average) from intervals; those outside the window add nothing."""
    return {"t": _buckets(start, end, step), "used": _spread(intervals, start, end, step)}


def cluster_allocation_series(*, start: datetime, end: datetime, step: timedelta
                              ) -> dict[str, Any]:
    """GPUs allocated per cluster per bucket (average), and each cluster's installed GPUs."""
    rows = _admissions(start, end, Q()).values_list("cluster__name", "reserved_at", "ended_at",
                                                    "gpus")
    by_cluster: dict[str, list[tuple[datetime, datetime | None, float]]] = defaultdict(list)
    for name, s, e, g in rows:
        by_cluster[name].append((s, e, float(g)))
    installed: dict[str, int] = defaultdict(int)
    for name, gpus in Node.objects.values_list("cluster__name", "gpus"):
        installed[name] += gpus
    names = sorted(set(installed) | set(by_cluster) | set(
        Cluster.objects.values_list("name", flat=True)))
    return {
        "t": _buckets(start, end, step),
        "clusters": {n: _spread(by_cluster.get(n, []), start, end, step) for n in names},
        "installed": dict(installed),
    }


# Each admitted workload's wait in minutes, computed by the database: ten thousand rows of two
# timestamps each cost more to parse in Python than the rest of the fleet page.
_WAITS_SQL = """
SELECT q.path, (EXTRACT(EPOCH FROM MIN(a.reserved_at) - w.submitted_at) / 60)::float8
FROM scheduling_workload w
JOIN quotas_queue q ON q.id = w.queue_id
JOIN scheduling_admission a ON a.workload_id = w.id
WHERE w.submitted_at >= %s {queues}
GROUP BY w.id, q.path, w.submitted_at
"""


def _admitted_waits(start: datetime, queue_ids: frozenset[int] | None, admitted: Any
                    ) -> list[tuple[str, float]]:
    """(queue path, minutes from submission to first admission) of each workload submitted
    since `start` and admitted: one float per row on PostgreSQL, the ORM elsewhere."""
    if postgres():
        params: list[Any] = [start]
        queues = ""
        if queue_ids is not None:
            queues = "AND w.queue_id = ANY(%s)"
            params.append(sorted(queue_ids))
        with connection.cursor() as cursor:
            cursor.execute(_WAITS_SQL.replace("{queues}", queues), params)
            return [(str(path), float(minutes)) for path, minutes in cursor.fetchall()]
    # The database finds each workload's first admission; Python computes the minutes.
    rows = (admitted.values("queue__path", "submitted_at")
            .annotate(first=Min("admissions__reserved_at"))
            .values_list("queue__path", "submitted_at", "first"))
    return [(path, (first - submitted).total_seconds() / 60) for path, submitted, first in rows]


def queue_waits(*, start: datetime, now: datetime, queue_ids: frozenset[int] | None = None
                ) -> list[dict[str, Any]]:
    """Per leaf queue: how long admitted work waited (median, p90, minutes) since `start`,
    and how long its pending work has waited so far."""
    admitted = Workload.objects.filter(submitted_at__gte=start, admissions__isnull=False)
    pend = Workload.objects.filter(state=WorkloadState.PENDING)
    if queue_ids is not None:
        admitted = admitted.filter(queue_id__in=queue_ids)
        pend = pend.filter(queue_id__in=queue_ids)
    waits: dict[str, list[float]] = defaultdict(list)
    for path, minutes in _admitted_waits(start, queue_ids, admitted):
        waits[path].append(max(0.0, minutes))
    # Pending work: its count (`pending_counts`, the dashboard's) and the oldest submission
    # per queue are all the chart needs.
    counts = pending_counts(None if queue_ids is None else sorted(queue_ids))
    pending: dict[str, tuple[int, float]] = {
        path: (counts.get(qid, 0), max(0.0, (now - oldest).total_seconds() / 60))
        for qid, path, oldest in pend.values("queue_id", "queue__path").annotate(
            oldest=Min("submitted_at")).values_list("queue_id", "queue__path", "oldest")}
    out = []
    for path in sorted(set(waits) | set(pending)):
        w = sorted(waits.get(path, []))
        n_pending, oldest_min = pending.get(path, (0, None))
        out.append({
            "queue": path, "admitted": len(w),
            "median_min": w[len(w) // 2] if w else None,
            "p90_min": w[min(len(w) - 1, int(len(w) * 0.9))] if w else None,
            "pending": n_pending, "pending_max_min": oldest_min,
        })
    return out


def shared_cards() -> list[dict[str, Any]]:
    """The cards that hold fractions now, per node (cluster, node, GPU model, cards): each
    card's pods, share used and free, and GPU memory free (a fraction's slice: its pod set's
    `gpu_memory_gib`, else its share of the card's memory). From the open admissions' cards
    (one per pod, in the order of the pod sets' pods)."""
    from scheduling.models import PodSet

    admissions = list(Admission.objects.filter(ended_at__isnull=True)
                      .exclude(cards=[]).values_list("workload_id", "cluster__name",
                                                     "flavor__name", "flavor__gpu_memory_gib",
                                                     "nodes", "cards"))
    if not admissions:
        return []
    pods: dict[int, list[tuple[Decimal, Decimal | None]]] = defaultdict(list)
    sets = PodSet.objects.filter(workload_id__in={a[0] for a in admissions})
    for wid, count, gpus, gmem in sets.order_by("workload_id", "index").values_list(
            "workload_id", "count", "gpus", "gpu_memory_gib"):
        pods[wid] += [(Decimal(gpus), None if gmem is None else Decimal(gmem))] * count
    cards: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for wid, cluster, flavor, card_mem, nodes, per_pod in admissions:
        for k, (node, card) in enumerate(zip(nodes, per_pod, strict=False)):
            if card is None or k >= len(pods[wid]):
                continue
            share, slice_gib = pods[wid][k]
            if not 0 < share < 1:
                continue
            memory = Decimal(card_mem or 0)
            slot = cards[(cluster, node, flavor)].setdefault(
                int(card), {"card": int(card), "pods": 0, "used": ZERO, "memory": memory,
                            "memory_used": ZERO})
            slot["pods"] += 1
            slot["used"] += share
            slot["memory_used"] += slice_gib if slice_gib is not None else share * memory
    out = []
    for (cluster, node, flavor), by_card in sorted(cards.items()):
        rows = []
        for card in sorted(by_card):
            slot = by_card[card]
            slot["free"] = max(ZERO, 1 - slot["used"])
            slot["memory_free"] = max(ZERO, slot["memory"] - slot["memory_used"])
            rows.append(slot)
        out.append({"cluster": cluster, "node": node, "flavor": flavor, "cards": rows,
                    "free": sum((r["free"] for r in rows), ZERO)})
    return out


def borrowing_now(*, scope: Scope) -> list[dict[str, Any]]:
    """Who lends to whom now, per GPU model: for each group of sibling queues (the queues under
    one parent) where some borrow, the borrowers with the GPUs they use above their guarantee
    and the lenders with the idle lendable part of their guarantee that covers it.

    Every figure is the tree's own (`quotas.selectors.queue_tree`: the queue page's, the tree
    page's and the dashboard's "borrowed" and "lent"). The engine pools what siblings lend
    (docs/engine.md §3: a borrower takes from its parent's available, less the siblings' idle
    exclusive parts), so a group's borrowers borrow from all of its lenders together;
    `from_above` is what their lenders' idle guarantee does not cover: the parent's own share
    not given to a child, or what the parent itself borrows from its siblings (its own group,
    listed too). A queue the user may not see reads as "another team's queue"."""
    from quotas.selectors import queue_tree

    groups: list[dict[str, Any]] = []

    def name(node: dict[str, Any]) -> dict[str, Any]:
        seen = scope.can_see_queue(node["id"])
        return {"path": node["path"] if seen else None, "visible": seen}

    def walk(parent: dict[str, Any] | None, children: list[dict[str, Any]]) -> None:
        flavors = sorted({f for c in children for f, res in c["quota"].items() if "gpu" in res})
        for flavor in flavors:
            borrowers, lenders = [], []
            for c in children:
                cell = c["quota"].get(flavor, {}).get("gpu")
                if cell is None:
                    continue
                if cell["borrowed"] > 0:
                    borrowers.append({**name(c), "borrowed": cell["borrowed"],
                                      "used": cell["used"], "min": cell["min"]})
                if cell["lent"] > 0:
                    lenders.append({**name(c), "lent": cell["lent"], "used": cell["used"],
                                    "min": cell["min"], "lendable": cell["lendable"]})
            if not borrowers:
                continue
            borrowed = sum((b["borrowed"] for b in borrowers), ZERO)
            idle = sum((lender["lent"] for lender in lenders), ZERO)
            visible = (parent is None and (scope.is_admin or any(
                b["visible"] for b in borrowers + lenders))) or (
                parent is not None and (scope.can_see_queue(parent["id"]) or any(
                    b["visible"] for b in borrowers + lenders)))
            if not visible:
                continue
            groups.append({
                "parent": name(parent) if parent is not None else {"path": "", "visible": True},
                "flavor": flavor, "borrowers": borrowers, "lenders": lenders,
                "borrowed": borrowed, "lent": idle,
                "from_above": max(ZERO, borrowed - idle),
            })
        for c in children:
            if c["children"]:
                walk(c, c["children"])

    walk(None, queue_tree())
    return groups
