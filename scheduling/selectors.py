"""Workload reads: visibility, detail, queue usage and a workload's place in its queue."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from django.db.models import Count, DecimalField, F, Prefetch, Q, QuerySet, Sum
from django.db.models.fields.json import KT

from core import db
from scheduling.models import (
    ACTIVE_STATES,
    Admission,
    EventType,
    PodSet,
    Workload,
    WorkloadEstimate,
    WorkloadEvent,
    WorkloadState,
)

Key = tuple[str, str]
ZERO = Decimal(0)


def workloads_visible(user: Any) -> QuerySet[Workload]:
    """Workloads `user` may see: admins all; others their own and their teams'."""
    qs = Workload.objects.select_related("queue", "team", "owner", "priority_class")
    if user.is_staff or user.is_superuser:
        return qs
    return qs.filter(Q(owner=user) | Q(team__members=user)).distinct()


def workload_list(*, user: Any) -> QuerySet[Workload]:
    """The list the API and the pages show: visible, newest first, pod sets prefetched."""
    return (workloads_visible(user).defer("manifest").prefetch_related("pod_sets")
            .order_by("-submitted_at", "-id"))


def workload_get(*, user: Any, pk: int) -> Workload | None:
    """One visible workload with everything its detail shows, or None (foreign ids too)."""
    return (
        workloads_visible(user)
        .prefetch_related(
            "pod_sets",
            Prefetch("events", queryset=WorkloadEvent.objects.select_related("actor")
                     .order_by("at", "id")),
            Prefetch("admissions", queryset=Admission.objects.select_related("cluster", "flavor")
                     .order_by("reserved_at", "id")),
        )
        .filter(pk=pk)
        .first()
    )


def workload_reasons(workload: Workload, events: list[WorkloadEvent] | None = None
                     ) -> list[dict[str, Any]]:
    """Every reason the workload was given, in time order (from its events, or `events`)."""
    return [
        {"code": e.code, "message": e.message, "at": e.at}
        for e in (workload.events.all() if events is None else events)
        if e.type in (EventType.REASON, EventType.REFUSED, EventType.TIMEOUT) and e.code
    ]


def workload_current_admission(workload: Workload, admissions: list[Admission] | None = None
                                ) -> Admission | None:
    """The open admission interval, else the latest one (None if never admitted), of the
    workload's admissions (or of `admissions`)."""
    admissions = list(workload.admissions.all()) if admissions is None else admissions
    open_ones = [a for a in admissions if a.ended_at is None]
    if open_ones:
        return open_ones[-1]
    return admissions[-1] if admissions else None


def pod_owners(start: datetime, end: datetime) -> Any:
    """Whose pods are whose over [start, end) (`naming.PodOwners`): the objects adopted from
    clusters (kubectl apply with the queue label) admitted in that time, by namespace and
    their own names; Allot's own objects need no lookup."""
    from scheduling.backends.naming import LABEL_OBJECT, PodOwners, adopted_group

    rows = Admission.objects.filter(reserved_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)).filter(
        workload__labels__has_key=LABEL_OBJECT).values_list(
        "workload_id", "workload__labels", "workload__queue__namespace", "workload__queue__path")
    adopted = {}
    for workload_id, labels, namespace, path in rows:
        group = adopted_group(labels)  # a LeaderWorkerSet's group: its pods' own prefix
        name = labels[LABEL_OBJECT] if group is None else f"{labels[LABEL_OBJECT]}-{group}"
        adopted[(namespace or path.replace("/", "-"), name)] = workload_id
    return PodOwners(adopted)


def workload_pods(workload: Workload, admission: Admission | None,
                  pod_sets: list[PodSet] | None = None) -> list[dict[str, Any]]:
    """One row per pod (of the workload's pod sets, or of `pod_sets`): name, pod set, node
    (when admitted) and a coarse phase."""
    from scheduling.backends.naming import job_name, pod_name

    nodes = list(admission.nodes) if admission is not None and admission.ended_at is None else []
    phases: dict[str, str] = {
        WorkloadState.RUNNING: "running", WorkloadState.RESERVED: "pending",
        WorkloadState.PREEMPTING: "terminating", WorkloadState.FINISHED: "succeeded",
        WorkloadState.FAILED: "failed",
    }
    phase = phases.get(str(workload.state), "")
    rows = []
    k = 0
    for ps in workload.pod_sets.all() if pod_sets is None else pod_sets:
        for i in range(ps.count):
            rows.append({
                "name": pod_name(job_name(workload.pk, ps.index), i), "pod_set": ps.index,
                "node": nodes[k] if k < len(nodes) else None, "phase": phase if nodes else "",
            })
            k += 1
    return rows


# --- usage ------------------------------------------------------------------------------------

def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def queue_usage() -> dict[str, dict[Key, dict[str, Decimal]]]:
    """Per queue path and key: used, borrowed, lent and pending, summed up the tree.

    used: admitted work (reserved, running, or preempting in its grace) in the subtree;
    borrowed: used above min; lent: the idle lendable part of min that siblings borrow now;
    pending: demand of pending work on its first acceptable flavor. Keys no queue sets have
    min 0 and report no borrowing.
    """
    from quotas.models import QuotaEntry

    usage: dict[str, dict[Key, dict[str, Decimal]]] = defaultdict(
        lambda: defaultdict(lambda: {"used": ZERO, "borrowed": ZERO, "lent": ZERO,
                                     "pending": ZERO}))
    admitted: Any = (
        Admission.objects.filter(ended_at__isnull=True)
        .values("workload__queue__path", "flavor__name")
        .annotate(gpu=Sum("gpus"), cpu=Sum("cpu"), memory=Sum("memory_gib"))
    )
    for row in admitted:
        for path in _ancestors(row["workload__queue__path"]):
            for resource in ("gpu", "cpu", "memory"):
                usage[path][(row["flavor__name"], resource)]["used"] += Decimal(
                    row[resource] or 0)
    # Pending demand summed in SQL per (leaf, first acceptable flavor): a few hundred rows
    # however many workloads wait (was one row per pending pod set, summed here).
    number = DecimalField(max_digits=20, decimal_places=3)
    pending: Any = (
        PodSet.objects.filter(workload__state=WorkloadState.PENDING)
        .annotate(first_flavor=KT("flavors__0"))
        .values("workload__queue__path", "first_flavor")
        .annotate(gpu=Sum(F("count") * F("gpus"), output_field=number),
                  cpu=Sum(F("count") * F("cpu"), output_field=number),
                  memory=Sum(F("count") * F("memory_gib"), output_field=number))
        .order_by()
    )
    ancestors: dict[str, list[str]] = {}
    for row in pending:
        flavor = row["first_flavor"]
        if not flavor:
            continue
        leaf = row["workload__queue__path"]
        if leaf not in ancestors:
            ancestors[leaf] = _ancestors(leaf)
        for resource in ("gpu", "cpu", "memory"):
            value = Decimal(row[resource] or 0)
            for path in ancestors[leaf]:
                usage[path][(flavor, resource)]["pending"] += value

    # min and lendable resolve locally (unset: 0; lendable unset: min), so the quota rows
    # suffice; only max needs the parent, and usage does not use max.
    quota: dict[Key, dict[str, tuple[Decimal, Decimal]]] = defaultdict(dict)
    for entry in QuotaEntry.objects.values("queue__path", "flavor__name", "resource", "min",
                                           "lendable"):
        qmin = Decimal(entry["min"] or 0)
        lendable = qmin if entry["lendable"] is None else Decimal(entry["lendable"])
        quota[(entry["flavor__name"], entry["resource"])][entry["queue__path"]] = (qmin,
                                                                                 lendable)
    for key, per_queue in quota.items():
        paths = set(per_queue) | {p for p, keys in usage.items() if key in keys}
        siblings: dict[str, list[str]] = defaultdict(list)
        for path in paths:
            siblings[path.rpartition("/")[0]].append(path)
            qmin = per_queue.get(path, (ZERO, ZERO))[0]
            cell = usage[path][key]
            cell["borrowed"] = max(ZERO, cell["used"] - qmin)
        for group in siblings.values():
            borrowed = sum((usage[s][key]["borrowed"] for s in group), ZERO)
            idle = {}
            for path in group:
                qmin, lendable = per_queue.get(path, (ZERO, ZERO))
                idle[path] = min(lendable, max(ZERO, qmin - usage[path][key]["used"]))
            for path, lent in lent_shares(idle, borrowed).items():
                usage[path][key]["lent"] = lent
    return {path: dict(keys) for path, keys in usage.items()}


LENT_UNIT = Decimal("0.001")  # the quota's resolution (QuotaEntry: 3 decimal places)


def lent_shares(idle: dict[str, Decimal], borrowed: Decimal) -> dict[str, Decimal]:
    """What each of a group of siblings lends: the group's borrowed total (as far as their
    idle lendable parts cover it) attributed in proportion to each one's idle part (`idle`:
    path -> idle lendable part of its min). Shares are rounded down to whole units (one GPU
    when every amount is whole, else 0.001); the units left go one each to the largest
    remainders, ties to the larger idle part, then the path in alphabetical order. So the
    lent figures add up to exactly what is borrowed from the siblings, no lender shows more
    than its idle part, and the same tree always gives the same figures (docs/quota-tree.md,
    "Borrowed and lent")."""
    out = {path: ZERO for path in idle}
    pool = sum((v for v in idle.values() if v > 0), ZERO)
    total = min(max(borrowed, ZERO), pool)
    if total <= 0:
        return out
    whole = all(v == v.to_integral_value() for v in (*idle.values(), total))
    unit = Decimal(1) if whole else LENT_UNIT
    remainders = []
    for path, part in idle.items():
        if part <= 0:
            continue
        exact = total * part / pool
        share = (exact / unit).to_integral_value(rounding=ROUND_FLOOR) * unit
        out[path] = share
        remainders.append((exact - share, part, path))
    left = total - sum(out.values(), ZERO)
    for _, _, path in sorted(remainders, key=lambda r: (-r[0], -r[1], r[2])):
        if left < unit:
            break
        out[path] += unit
        left -= unit
    return out


def fleet_usage() -> dict[tuple[str, str], dict[str, Decimal]]:
    """Used gpu/cpu/memory per (cluster, flavor) from the open admissions."""
    rows = (
        Admission.objects.filter(ended_at__isnull=True)
        .values("cluster__name", "flavor__name")
        .annotate(gpu=Sum("gpus"), cpu=Sum("cpu"), memory=Sum("memory_gib"))
    )
    return {
        (r["cluster__name"], r["flavor__name"]): {
            "gpu": Decimal(r["gpu"] or 0), "cpu": Decimal(r["cpu"] or 0),
            "memory": Decimal(r["memory"] or 0),
        }
        for r in rows
    }


def gpus_free(ready: int, used: int) -> int:
    """The rule for free GPUs of one cluster and GPU model: GPUs on its ready nodes less those
    open admissions hold there, never below 0 (used may exceed ready while a node is down)."""
    return max(0, int(ready) - int(used))


def cluster_gpus() -> dict[tuple[str, str], dict[str, Any]]:
    """GPUs per (cluster, flavor): `installed` (every node), `ready` (ready nodes), `used`
    (open admissions), `free` (ready - used, never below 0), and the cluster's `health` and
    `enabled`. The one place "free GPUs" is computed: the fleet page, the clusters API, the
    dashboard's headroom and a pending workload's wait gap all read it."""
    from scheduling.models import Cluster, Node

    out: dict[tuple[str, str], dict[str, Any]] = {}
    clusters: dict[str, dict[str, Any]] = {
        c["name"]: dict(c) for c in Cluster.objects.values("name", "health", "enabled")}
    rows = Node.objects.values("cluster__name", "flavor__name", "gpus", "ready")
    for n in rows:
        cell = out.setdefault((n["cluster__name"], n["flavor__name"]), {
            "installed": 0, "ready": 0, "used": 0, "free": 0,
            "health": clusters[n["cluster__name"]]["health"],
            "enabled": clusters[n["cluster__name"]]["enabled"]})
        cell["installed"] += n["gpus"]
        if n["ready"]:
            cell["ready"] += n["gpus"]
    for (cluster, flavor), amounts in fleet_usage().items():
        cell = out.setdefault((cluster, flavor), {
            "installed": 0, "ready": 0, "used": 0, "free": 0,
            "health": clusters.get(cluster, {}).get("health", 0.0),
            "enabled": clusters.get(cluster, {}).get("enabled", False)})
        cell["used"] = int(amounts["gpu"])
    for cell in out.values():
        cell["free"] = gpus_free(cell["ready"], cell["used"])
    return out


def gpu_headroom(*, min_health: float | None = None) -> dict[str, dict[str, int]]:
    """Per GPU model: `installed`, `usable` (ready GPUs of enabled clusters at or above
    `min_health`, default the engine's `min_cluster_health`), `used` (on those clusters) and
    `free` (the sum of their per-cluster free GPUs, `cluster_gpus`)."""
    from django.conf import settings

    if min_health is None:
        min_health = float(settings.ALLOT_ENGINE.get("min_cluster_health", 0.5))
    out: dict[str, dict[str, int]] = {}
    for (_cluster, flavor), cell in sorted(cluster_gpus().items()):
        if not cell["installed"]:
            continue
        row = out.setdefault(flavor, {"installed": 0, "usable": 0, "used": 0, "free": 0})
        row["installed"] += cell["installed"]
        if cell["enabled"] and cell["health"] >= min_health:
            row["usable"] += cell["ready"]
            row["used"] += cell["used"]
            row["free"] += cell["free"]
    return out


def pending_counts(queue_ids: list[int] | None = None) -> dict[int, int]:
    """Pending workloads per queue id (every queue, or those of `queue_ids`): the one count
    the dashboard's cards and the fleet page's waits show."""
    qs = Workload.objects.filter(state=WorkloadState.PENDING)
    if queue_ids is not None:
        qs = qs.filter(queue_id__in=queue_ids)
    return {row["queue_id"]: row["n"]
            for row in qs.values("queue_id").annotate(n=Count("id")).order_by()}


# --- queue position ---------------------------------------------------------------------------

def _gpus(workload: Workload, pod_sets: list[PodSet] | None = None) -> Decimal:
    return sum((ps.count * ps.gpus
                for ps in (workload.pod_sets.all() if pod_sets is None else pod_sets)),
               Decimal(0))


def position_sql(me: str) -> tuple[str, str]:
    """The two reads of a queue position, as SQL: (the pending workloads of the queue ordered
    before one workload, as one row of their count `n` and GPUs `g`; the queue's open
    admissions, one row each: id, gpus, duration hint, progress, running_at, reserved_at).

    The order is the engine's within one queue: higher priority first, then earlier
    submission, then lower id. The GPUs are each workload's `gpus_total` (in the pending-head
    index), its pod sets' where that is NULL. `me` is the SQL of the workload's id (`%s`, or a
    sub-select when the workload is being inserted by the same statement). Parameters, in
    order: `position_params`."""
    ahead = f"""SELECT COUNT(*) AS n, COALESCE(SUM(COALESCE(qw.gpus_total, (
       SELECT SUM(p.count * p.gpus) FROM scheduling_podset p WHERE p.workload_id = qw.id))),
       0) AS g
FROM scheduling_workload qw JOIN scheduling_priorityclass c ON c.id = qw.priority_class_id
WHERE qw.queue_id = %s AND qw.state = %s AND qw.id <> {me}
  AND (c.value > %s OR (c.value = %s AND (qw.submitted_at < %s
       OR (qw.submitted_at = %s AND qw.id < {me}))))"""
    admitted = """SELECT a.id, a.gpus, aw.duration_hint_s, aw.progress_s, a.running_at,
       a.reserved_at
FROM scheduling_admission a JOIN scheduling_workload aw ON aw.id = a.workload_id
WHERE aw.queue_id = %s AND a.ended_at IS NULL AND aw.state = ANY(%s)"""
    return ahead, admitted


def position_params(workload: Workload, me: list[Any]) -> list[Any]:
    """The parameters of `position_sql`'s two reads, in order (`me`: [the workload's id] when
    `me` is `%s`, [] when it is a sub-select)."""
    value, at = workload.priority_class.value, workload.submitted_at
    return [workload.queue_id, str(WorkloadState.PENDING), *me, value, value, at, at, *me,
            workload.queue_id, [str(s) for s in ACTIVE_STATES]]


_AHEAD_SQL, _ADMITTED_SQL = position_sql("%s")
_POSITION_SQL = f"""
SELECT 0, n, g, NULL, NULL, NULL FROM ({_AHEAD_SQL}) ahead
UNION ALL
SELECT 1, gpus, duration_hint_s, progress_s, running_at, reserved_at FROM ({_ADMITTED_SQL}) adm
"""


PositionRows = tuple[int, int, list[tuple[int, Any, Any, Any, Any]]]


def _position_rows(workload: Workload) -> PositionRows:
    """(pending workloads ahead, their GPUs, the queue's open admissions as (gpus, duration
    hint, progress, running_at, reserved_at)): one query on PostgreSQL, the ORM elsewhere;
    none for a workload just submitted (its insert read them: `request.submission._insert_one`)."""
    read_at_insert = getattr(workload, "_position_rows", None)
    if read_at_insert is not None:
        return read_at_insert  # type: ignore[no-any-return]
    if db.postgres():
        with db.hot_cursor() as cursor:
            cursor.execute(_POSITION_SQL, position_params(workload, [workload.pk]))
            rows = cursor.fetchall()
        head = next(r for r in rows if r[0] == 0)
        # UNION ALL widens the columns (a duration hint may come back as a Decimal).
        return int(head[1]), int(head[2]), [
            (int(r[1]), None if r[2] is None else int(r[2]), float(r[3]), r[4], r[5])
            for r in rows if r[0] == 1]
    return _position_rows_orm(workload)


def _position_rows_orm(workload: Workload) -> PositionRows:
    """What `_position_rows` reads, through the ORM (the reference the SQL is tested against)."""
    value = workload.priority_class.value
    ahead = (
        Workload.objects.filter(queue_id=workload.queue_id, state=WorkloadState.PENDING)
        .exclude(pk=workload.pk)
        .filter(
            Q(priority_class__value__gt=value)
            | Q(priority_class__value=value, submitted_at__lt=workload.submitted_at)
            | Q(priority_class__value=value, submitted_at=workload.submitted_at,
                pk__lt=workload.pk)
        )
    )
    gpus = PodSet.objects.filter(workload__in=ahead).aggregate(
        g=Sum(F("count") * F("gpus")))["g"]
    active = (
        Admission.objects.filter(workload__queue_id=workload.queue_id, ended_at__isnull=True,
                                 workload__state__in=ACTIVE_STATES)
        .values_list("gpus", "workload__duration_hint_s", "workload__progress_s",
                     "running_at", "reserved_at")
    )
    return ahead.count(), int(gpus or 0), [(int(g), h, float(p), r, s)
                                           for g, h, p, r, s in active]


def workload_queue_position(workload: Workload, *, now: datetime | None = None,
                            pod_sets: list[PodSet] | None = None) -> dict[str, Any] | None:
    """Where a pending workload stands in its leaf queue (None unless pending).

    `in_queue`: 1 + the pending workloads of the queue ordered before it (higher priority,
    then earlier submission, as the engine orders within one queue); `ahead_gpus`: their GPUs.
    The start comes from the latest forecast (the whole fleet fast-forwarded through the
    engine, scheduling/workers/eta.py): `estimated_start` and `estimated_start_range`
    ({low, high}: over run times from their 25th to their 95th percentile, the low end with
    no new work, widened by half the resolution; high None when beyond the horizon at some
    level), `estimate_assumes` (what it assumes) and
    `estimate_computed_at`. All None until the forecast has run since its submission, and
    for a workload held for approval (the cycle does not see it yet).
    `pod_sets`: the workload's, when the caller has them.
    """
    if workload.state != WorkloadState.PENDING:
        return None
    n_ahead, ahead_gpus, _active = _position_rows(workload)
    est = None
    if getattr(workload, "_position_rows", None) is None and not workload.needs_approval:
        est = workload_estimate(workload.pk)
    return {
        "in_queue": n_ahead + 1, "ahead_gpus": ahead_gpus,
        "estimated_start": est.start if est else None,
        "estimated_start_range": ({"low": est.low, "high": est.high}
                                  if est and est.low is not None else None),
        "estimate_assumes": est.assumes if est else "",
        "estimate_computed_at": _checked_at(est) if est else None,
    }


# The time of the latest start forecast (ISO; scheduling/workers/eta.py): every stored
# estimate was checked then (a row keeps the `computed_at` of the forecast that last moved it).
ETA_REFRESHED_KEY = "scheduling:eta:refreshed_at"


def _checked_at(est: WorkloadEstimate) -> datetime:
    """When the forecast last said this: the latest refresh (every stored row was checked
    then; one that did not move keeps the `computed_at` of the refresh that last moved it)."""
    from django.core.cache import cache

    latest = cache.get(ETA_REFRESHED_KEY)
    if not latest:
        return est.computed_at
    return max(est.computed_at, datetime.fromisoformat(latest))


def workload_estimate(pk: int) -> WorkloadEstimate | None:
    """The latest forecast of a pending workload's start (None: not forecast yet)."""
    return WorkloadEstimate.objects.filter(workload_id=pk).first()


# --- the gap between free GPUs and a wait -------------------------------------------------------

_GAP_WORDS = {
    "QUOTA_BORROW_UNAVAILABLE": "guarantee",
    "NON_PREEMPTIBLE_BEYOND_MIN": "guarantee",
    "QUOTA_MAX": "limit",
    "COOLDOWN": "cooldown",
    "NO_CAPACITY": "shape",
    "TOPOLOGY_UNSATISFIABLE": "shape",
    "WAITING_FOR_PREEMPTION": "freeing",
    "NEEDS_APPROVAL": "approval",
}


def workload_wait_gap(workload: Workload, pod_sets: list[PodSet] | None = None
                      ) -> dict[str, Any] | None:
    """For a pending workload: free GPUs of its first GPU model on ready nodes (of enabled
    clusters), what it asks for, and which kind of reason makes it wait anyway (`kind`:
    guarantee, limit, cooldown, shape, freeing, approval; "" when the reason names none).
    None unless pending or when it asks for no GPU. The reason itself says the numbers.
    The free GPUs are the dashboard's headroom (`gpu_headroom`)."""
    if workload.state != WorkloadState.PENDING:
        return None
    sets = list(workload.pod_sets.all()) if pod_sets is None else pod_sets
    asks = _gpus(workload, sets)
    flavors = sets[0].flavors if sets else []
    if asks == 0 or not flavors:
        return None
    flavor = flavors[0]
    room = gpu_headroom().get(flavor, {"usable": 0, "free": 0})
    capacity, free = room["usable"], room["free"]
    kind = ("approval" if workload.needs_approval
            else _GAP_WORDS.get(str(workload.reason_code), ""))
    if kind == "shape" and "capacity held for starving" in (workload.reason_message or ""):
        kind = "held"
    return {"flavor": flavor, "free": free, "capacity": int(capacity), "asks": asks,
            "enough_free": free >= asks, "kind": kind}


def open_workload_named(*, queue: Any, name: str) -> Workload | None:
    """The open workload of `queue` holding `name` (names are unique among them), or None."""
    from scheduling.models import OPEN_STATES

    return Workload.objects.filter(queue=queue, name=name, state__in=OPEN_STATES).only(
        "pk", "name", "state").first()


# --- a queue's pending list (the queue page, GET /api/v1/queues/{path}/pending) ----------------

PENDING_LIST_ROWS = 100


def forecast_order() -> list[datetime]:
    """The forecast start of every pending workload the last forecast placed within its
    horizon, earliest first: a workload's place across the fleet is 1 + those before its own."""
    return [start for start in WorkloadEstimate.objects.filter(
        start__isnull=False, workload__state=WorkloadState.PENDING,
        workload__needs_approval=False).order_by("start").values_list("start", flat=True)
        if start is not None]


def queue_pending(*, user: Any, path: str, limit: int = PENDING_LIST_ROWS) -> dict[str, Any]:
    """The pending workloads of a queue (and of the queues below it), in the engine's admission
    order within each leaf (higher priority, then earlier submission, then lower id), each
    with its place: `position` is `workload_queue_position` (its leaf's `in_queue`, the GPUs
    ahead, the forecast start and range), `fleet_position` its place among every pending
    workload of the fleet by that same forecast (None when not forecast, later than the
    horizon, or held for approval). A workload the user may not see keeps its place and reads
    "a workload of another team" (`visible` false, no name, no link).

    Returns `{"rows", "total", "as_of"}`; at most `limit` rows (`total` counts them all)."""
    import bisect

    from django.utils import timezone

    qs = (Workload.objects.filter(Q(queue__path=path) | Q(queue__path__startswith=f"{path}/"),
                                  state=WorkloadState.PENDING)
          .select_related("queue", "owner", "priority_class").defer("manifest")
          .prefetch_related("pod_sets")
          .order_by("queue__path", "-priority_class__value", "submitted_at", "id"))
    total = qs.count()
    workloads = list(qs[:limit])
    visible = set(workloads_visible(user).filter(pk__in=[w.pk for w in workloads])
                  .values_list("pk", flat=True))
    order = forecast_order()
    rows = []
    for w in workloads:
        pod_sets = list(w.pod_sets.all())
        position = workload_queue_position(w, pod_sets=pod_sets)
        start = position["estimated_start"] if position else None
        rows.append({
            "workload": w, "visible": w.pk in visible, "gpus": _gpus(w, pod_sets),
            "flavors": pod_sets[0].flavors if pod_sets else [],
            "position": position,
            "fleet_position": (bisect.bisect_left(order, start) + 1
                               if start is not None else None),
        })
    return {"rows": rows, "total": total, "fleet_pending": len(order),
            "as_of": timezone.now()}
