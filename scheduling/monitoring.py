"""The scheduling side of /metrics (served by portal/monitoring.py), in Prometheus' families.

Gauges are read from the database at scrape time, each family by one grouped query on
indexed columns (open workloads by queue, state and reason; open admissions; quota entries;
clusters, nodes, undelivered outbox rows), whatever process serves the scrape.

Counters and histograms are running totals, so they survive restarts and never depend on
which process is scraped:

- the cycle's duration is added by each cycle (`tallies.cycle_observe`);
- admissions (with their wait), preemptions, evictions and dispatch refusals come from the
  workload events. A total is the `MetricTally` rows, which hold the events older than the
  fold mark, plus the events since the mark, counted at each scrape through the events'
  (type, at) index. A scrape moves the mark to a minute at least `LATE_S` ago when it is a
  minute behind that, adding the events in between to the rows once (the mark's conditional
  update lets one process do it; another scrape at the same time counts those events from
  the index instead). An event committed more than `LATE_S` after its time would be missed:
  no transaction that writes events (a cycle, a dispatch pass, a cancel) lasts that long.

Labels follow Kueue's where it has the figure (`queue` for its `cluster_queue`): a queue is
named by its path, a flavor and a cluster by name, a resource as `gpu`, `cpu`, `memory`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Min, OuterRef, Q, Subquery, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from quotas.models import Queue, QuotaEntry
from scheduling import tallies
from scheduling.models import (
    OPEN_STATES,
    PLACED_STATES,
    Admission,
    Cluster,
    CycleMark,
    EventType,
    MetricTally,
    Node,
    OutboxMessage,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.selectors import fleet_usage, queue_usage
from scheduling.tallies import INF, ORPHANS, SUM, WAIT_BUCKETS, Series, le_text

LATE_S = 600  # events are folded into the tallies once this old
STEP_S = 60  # the fold mark moves by whole minutes
FOLD = "_folded_until"  # the mark's row: epoch seconds
ADMITTED, WAIT, PREEMPTED, EVICTED, REFUSED = (
    "admitted", "admission_wait", "preempted", "evicted", "refused")
# A pending workload no cycle has given a reason yet.
QUEUED = "QUEUED"
# Evictions by event type, named as Kueue names its eviction reasons where it has one.
EVICTIONS = {EventType.PREEMPTED: "Preempted", EventType.TIMEOUT: "PodsReadyTimeout",
             EventType.REFUSED: "DispatchRefused", EventType.RECLAIMED: "Stuck"}


def scheduling_families(now: datetime) -> list[Metric]:
    """Every scheduling family of /metrics at `now`."""
    queues: dict[int, dict[str, Any]] = {
        q["id"]: dict(q) for q in Queue.objects.values("id", "path", "parent_id", "depth")}
    paths = {pk: q["path"] for pk, q in queues.items()}
    return [*_workload_gauges(paths, now), *_quota_gauges(queues),
            *_event_families(paths, now), *_cycle_families(), *_cluster_gauges(now)]


# --- gauges --------------------------------------------------------------------------------


def _workload_gauges(paths: dict[int, str], now: datetime) -> list[Metric]:
    pending = GaugeMetricFamily(
        "allot_pending_workloads", "Workloads waiting for admission, per queue and the reason "
        f"the last cycle gave ({QUEUED}: no cycle has looked at them yet).",
        labels=["queue", "reason"])
    oldest = GaugeMetricFamily(
        "allot_pending_oldest_seconds", "How long the longest-waiting pending workload of the "
        "queue has waited since it was submitted or requeued, per queue and reason.",
        labels=["queue", "reason"])
    active = GaugeMetricFamily(
        "allot_admitted_active_workloads", "Admitted workloads holding a reservation or "
        "running (not preempting, not ended), per queue.", labels=["queue"])
    by_state = GaugeMetricFamily(
        "allot_workloads", "Workloads not ended, per queue and state.",
        labels=["queue", "state"])
    rows = (Workload.objects.filter(state__in=OPEN_STATES)
            .values_list("queue_id", "state", "reason_code")
            .annotate(n=Count("id"), since=Min("state_changed_at")).order_by())
    states: Counter[tuple[str, str]] = Counter()
    placed: Counter[str] = Counter()
    waiting = []
    for queue_id, state, reason, n, since in rows:
        path = paths.get(queue_id)
        if path is None:
            continue
        states[(path, state)] += n
        if state == WorkloadState.PENDING:
            waiting.append((path, reason or QUEUED, n, since))
        elif state in PLACED_STATES:
            placed[path] += n
    for path, reason, n, since in sorted(waiting):
        pending.add_metric([path, reason], n)
        oldest.add_metric([path, reason], max(0.0, (now - since).total_seconds()))
    for (path, state), n in sorted(states.items()):
        by_state.add_metric([path, state], n)
    for path, n in sorted(placed.items()):
        active.add_metric([path], n)
    return [pending, oldest, active, by_state]


def _quota_gauges(queues: dict[int, dict[str, Any]]) -> list[Metric]:
    labels = ["queue", "flavor", "resource"]
    nominal = GaugeMetricFamily(
        "allot_nominal_quota", "The guaranteed quota (min) a queue sets for a flavor and "
        "resource (Kueue: nominal quota).", labels=labels)
    borrowing = GaugeMetricFamily(
        "allot_borrowing_limit", "How far above its min a queue may use (its max, set or "
        "inherited, minus min); absent when unlimited.", labels=labels)
    lending = GaugeMetricFamily(
        "allot_lending_limit", "The part of a queue's min that may be lent while idle.",
        labels=labels)
    reserved = GaugeMetricFamily(
        "allot_quota_reserved_resource", "Resources held by the queue's subtree's admitted "
        "workloads (reserved, running, or preempted within their grace).", labels=labels)
    borrowed = GaugeMetricFamily(
        "allot_borrowed_resource", "What the queue's subtree uses above its min.", labels=labels)
    lent = GaugeMetricFamily(
        "allot_lent_resource", "The idle lendable part of the queue's min that others borrow.",
        labels=labels)
    demand = GaugeMetricFamily(
        "allot_pending_resource", "What the queue's subtree's pending workloads ask for, on "
        "their first acceptable flavor.", labels=labels)
    entries = list(QuotaEntry.objects.values_list(
        "queue_id", "flavor__name", "resource", "min", "max", "lendable"))
    ceiling = _resolved_max(queues, entries)
    explicit: set[tuple[str, str, str]] = set()
    for queue_id, flavor, resource, qmin, _, lendable in entries:
        path = queues[queue_id]["path"]
        explicit.add((path, flavor, resource))
        key = [path, flavor, resource]
        qmin = qmin or Decimal(0)
        nominal.add_metric(key, float(qmin))
        lending.add_metric(key, float(qmin if lendable is None else lendable))
        qmax = ceiling.get((queue_id, flavor, resource))
        if qmax is not None:
            borrowing.add_metric(key, float(max(qmax - qmin, Decimal(0))))
    # The keys some queue sets (a key none sets is not accounted, as Kueue reports only the
    # resources a queue covers): each queue that sets one reports it, 0 when unused, and
    # every other queue where it is in use or asked for.
    usage = queue_usage()
    zero = {"used": Decimal(0), "borrowed": Decimal(0), "lent": Decimal(0),
            "pending": Decimal(0)}
    accounted = {(flavor, resource) for _, flavor, resource in explicit}
    keys = explicit | {(path, *key) for path, per_key in usage.items() for key in per_key
                       if key in accounted}
    for path, flavor, resource in sorted(keys):
        figures = usage.get(path, {}).get((flavor, resource), zero)
        key = [path, flavor, resource]
        if (path, flavor, resource) in explicit or figures["used"]:
            reserved.add_metric(key, float(figures["used"]))
        for family, name in ((borrowed, "borrowed"), (lent, "lent"), (demand, "pending")):
            if figures[name]:
                family.add_metric(key, float(figures[name]))
    return [nominal, borrowing, lending, reserved, borrowed, lent, demand]


def _resolved_max(queues: dict[int, dict[str, Any]],
                  entries: list[tuple[Any, ...]]) -> dict[tuple[int, str, str], Decimal]:
    """Each queue's max per key as it applies (its own, else its parent's); unlimited keys
    are left out."""
    own: dict[int, dict[tuple[str, str], Decimal]] = defaultdict(dict)
    for queue_id, flavor, resource, _, qmax, _ in entries:
        if qmax is not None:
            own[queue_id][(flavor, resource)] = qmax
    applied: dict[int, dict[tuple[str, str], Decimal]] = {}
    for queue_id, q in sorted(queues.items(), key=lambda item: item[1]["depth"]):
        inherited = applied.get(q["parent_id"], {}) if q["parent_id"] else {}
        applied[queue_id] = {**inherited, **own.get(queue_id, {})}
    return {(queue_id, flavor, resource): value for queue_id, keys in applied.items()
            for (flavor, resource), value in keys.items()}


def _cycle_families() -> list[Metric]:
    mark = CycleMark.objects.filter(pk=1).values_list("ended_at", "seconds",
                                                      "guarantee_blocked").first()
    last = GaugeMetricFamily("allot_last_cycle_timestamp_seconds",
                             "When the last scheduling cycle ended (Unix time).")
    took = GaugeMetricFamily("allot_last_cycle_duration_seconds",
                             "How long the last scheduling cycle took.")
    unmet = GaugeMetricFamily(
        "allot_guarantee_unmet", "1 for each leaf queue whose guarantee the last cycle left "
        "blocked by borrowed work: a pending workload within its min does not fit and would "
        "if others gave back what they borrow, and no reclaim is under way for it.",
        labels=["queue"])
    unmet_count = GaugeMetricFamily("allot_guarantee_unmet_queues",
                                    "Leaf queues whose guarantee the last cycle left blocked.")
    blocked: list[str] = []
    if mark is not None and mark[0] is not None:
        last.add_metric([], mark[0].timestamp())
        took.add_metric([], mark[1])
        blocked = list(mark[2] or [])
    for path in blocked:
        unmet.add_metric([path], 1.0)
    unmet_count.add_metric([], len(blocked))
    return [last, took, unmet, unmet_count]


def _cluster_gauges(now: datetime) -> list[Metric]:
    health = GaugeMetricFamily(
        "allot_cluster_health", "A cluster's health as the engine sees it (0-1, lowered for a "
        "while after refused dispatches).", labels=["cluster"])
    enabled = GaugeMetricFamily("allot_cluster_enabled", "1 when the cluster takes workloads.",
                                labels=["cluster"])
    floor = GaugeMetricFamily(
        "allot_cluster_min_health", "Below this health the engine places nothing on a cluster "
        "(ALLOT_MIN_CLUSTER_HEALTH).")
    floor.add_metric([], float(settings.ALLOT_ENGINE["min_cluster_health"]))
    for cluster in Cluster.objects.only("name", "health", "health_penalty",
                                        "health_penalty_until", "enabled"):
        health.add_metric([cluster.name], cluster.effective_health(now))
        enabled.add_metric([cluster.name], 1.0 if cluster.enabled else 0.0)
    nodes = GaugeMetricFamily("allot_cluster_nodes", "Nodes per cluster, flavor and readiness.",
                              labels=["cluster", "flavor", "ready"])
    gpus = GaugeMetricFamily("allot_cluster_gpus", "GPUs of the ready nodes, per cluster and "
                             "flavor.", labels=["cluster", "flavor"])
    for row in (Node.objects.values("cluster__name", "flavor__name", "ready")
                .annotate(n=Count("id"), g=Sum("gpus")).order_by("cluster__name", "flavor__name")):
        key = [row["cluster__name"], row["flavor__name"]]
        nodes.add_metric([*key, "true" if row["ready"] else "false"], row["n"])
        if row["ready"]:
            gpus.add_metric(key, row["g"] or 0)
    used = GaugeMetricFamily("allot_cluster_gpus_reserved", "GPUs held by admitted workloads, "
                             "per cluster and flavor.", labels=["cluster", "flavor"])
    for (cluster_name, flavor), figures in sorted(fleet_usage().items()):
        used.add_metric([cluster_name, flavor], float(figures["gpu"]))
    return [health, enabled, floor, nodes, gpus, used, *_outbox_gauges(now)]


def _outbox_gauges(now: datetime) -> list[Metric]:
    undelivered = GaugeMetricFamily(
        "allot_outbox_undelivered_messages", "Cluster calls (delete, suspend, dispatch) not "
        "confirmed by their cluster yet.", labels=["cluster", "kind"])
    failing = GaugeMetricFamily(
        "allot_outbox_failing_messages", "Undelivered cluster calls that failed at least "
        "ALLOT_OUTBOX_ALARM_ATTEMPTS times.", labels=["cluster", "kind"])
    oldest = GaugeMetricFamily(
        "allot_outbox_oldest_undelivered_seconds", "Age of the oldest undelivered cluster "
        "call.", labels=["cluster", "kind"])
    alarm = int(settings.ALLOT_WORKERS["outbox_alarm_attempts"])
    rows = (OutboxMessage.objects.filter(delivered_at__isnull=True)
            .values("cluster__name", "kind")
            .annotate(n=Count("id"), bad=Count("id", filter=Q(attempts__gte=alarm)),
                      since=Min("created_at")).order_by("cluster__name", "kind"))
    for row in rows:
        key = [row["cluster__name"], row["kind"]]
        undelivered.add_metric(key, row["n"])
        failing.add_metric(key, row["bad"])
        oldest.add_metric(key, max(0.0, (now - row["since"]).total_seconds()))
    return [undelivered, failing, oldest]


# --- counters and histograms from events ---------------------------------------------------


def _event_families(paths: dict[int, str], now: datetime) -> list[Metric]:
    totals = event_totals(now)
    admitted = CounterMetricFamily("allot_admitted_workloads", "Admissions, per queue.",
                                   labels=["queue"])
    preempted = CounterMetricFamily(
        "allot_preempted_workloads", "Workloads preempted, per queue of the workload that "
        "preempted them and reason (reclaim: guarantee taken back; priority: same leaf).",
        labels=["queue", "reason"])
    evicted = CounterMetricFamily(
        "allot_evicted_workloads", "Admitted workloads sent back or stopped, per queue and "
        "reason (Preempted, PodsReadyTimeout, DispatchRefused, Stuck).",
        labels=["queue", "reason"])
    refused = CounterMetricFamily(
        "allot_dispatch_refusals", "Dispatches a cluster refused, per cluster and reason.",
        labels=["cluster", "reason"])
    waits: dict[str, dict[str, float]] = defaultdict(dict)
    for (family, queue_id, label), value in sorted(totals.items()):
        if family == REFUSED:
            cluster, _, reason = label.partition("|")
            refused.add_metric([cluster, reason], value)
            continue
        path = paths.get(queue_id)
        if path is None:
            continue
        if family == ADMITTED:
            admitted.add_metric([path], value)
        elif family == PREEMPTED:
            preempted.add_metric([path, label], value)
        elif family == EVICTED:
            evicted.add_metric([path, label], value)
        elif family == WAIT:
            waits[path][label] = value
    wait = HistogramMetricFamily(
        "allot_admission_wait_time_seconds", "Time from a workload's submission, or its "
        "last requeue, to its admission, per queue.", labels=["queue"])
    for path, counts in sorted(waits.items()):
        buckets, total = _cumulated(counts, tallies.WAIT_BUCKETS)
        wait.add_metric([path], buckets, total)
    return [admitted, preempted, evicted, refused, wait, _cycle_histogram(totals),
            _orphans_counter(totals)]


def _orphans_counter(rows: Counter[Series]) -> Metric:
    swept = CounterMetricFamily(
        "allot_orphan_objects_deleted", "Workloads whose objects the orphan sweep deleted from "
        "a cluster: left there after their workload was gone or ended "
        "(scheduling/fleet/orphans.py).", labels=["cluster"])
    for (family, _, cluster), value in sorted(rows.items()):
        if family == ORPHANS:
            swept.add_metric([cluster], value)
    return swept


def _cumulated(counts: Mapping[str, float],
               bounds: Iterable[float]) -> tuple[list[tuple[str, float]], float]:
    """Bucket counts kept per bucket (and a `sum`) as Prometheus' cumulated buckets."""
    running = 0.0
    buckets = []
    for bound in bounds:
        running += counts.get(le_text(bound), 0.0)
        buckets.append((le_text(bound), running))
    buckets.append((INF, running + counts.get(INF, 0.0)))
    return buckets, counts.get(SUM, 0.0)


def _cycle_histogram(rows: Counter[Series]) -> Metric:
    counts = {label: value for (family, _, label), value in rows.items()
              if family == tallies.CYCLE}
    family = HistogramMetricFamily("allot_cycle_duration_seconds",
                                   "How long scheduling cycles take.")
    buckets, total = _cumulated(counts, tallies.CYCLE_BUCKETS)
    family.add_metric([], buckets, total)
    return family


def event_totals(now: datetime) -> Counter[Series]:
    """Every running total: the tally rows plus the events since the fold mark (moved first
    when it is a minute or more behind)."""
    rows, mark = _read_tallies()
    target = int(now.timestamp() - LATE_S) // STEP_S * STEP_S
    if (mark is None or mark < target) and _fold(mark, target):
        rows, mark = _read_tallies()
    totals: Counter[Series] = Counter(rows)
    totals.update(event_tallies(since=_at(mark), until=None))
    return totals


def _read_tallies() -> tuple[dict[Series, float], int | None]:
    """The tally rows and the fold mark, in one statement (so they agree)."""
    rows = {(family, queue_id, label): value for family, queue_id, label, value in
            MetricTally.objects.values_list("family", "queue_id", "label", "value")}
    mark = rows.pop((FOLD, 0, ""), None)
    return rows, None if mark is None else int(mark)


def _fold(mark: int | None, target: int) -> bool:
    """Add the events in [mark, target) to the tallies and move the mark to `target`; False
    when another process moved it first (it added them)."""
    with transaction.atomic():
        if mark is None:
            _, created = MetricTally.objects.get_or_create(
                family=FOLD, queue_id=0, label="", defaults={"value": float(target)})
            if not created:
                return False
        elif not MetricTally.objects.filter(family=FOLD, queue_id=0, label="",
                                            value=float(mark)).update(value=float(target)):
            return False
        tallies.tallies_add(event_tallies(since=_at(mark), until=_at(target)).items())
    return True


def _at(epoch: int | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def event_tallies(*, since: datetime | None, until: datetime | None) -> Counter[Series]:
    """What the events in [since, until) add to each running total (None: no bound)."""
    def window(types: Iterable[str]) -> Any:
        events = WorkloadEvent.objects.filter(type__in=list(types))
        if since is not None:
            events = events.filter(at__gte=since)
        if until is not None:
            events = events.filter(at__lt=until)
        return events

    out: Counter[Series] = Counter()
    # The wait runs from submission, or from the end of the workload's previous admission.
    previous = (Admission.objects.filter(workload_id=OuterRef("workload_id"),
                                         reserved_at__lt=OuterRef("at"))
                .order_by("-reserved_at").values("ended_at")[:1])
    for queue_id, at, start in (window([EventType.ADMITTED])
                                .annotate(start=Coalesce(Subquery(previous),
                                                         F("workload__submitted_at")))
                                .values_list("workload__queue_id", "at", "start").iterator()):
        waited = max(0.0, (at - start).total_seconds())
        out[(ADMITTED, queue_id, "")] += 1
        out[(WAIT, queue_id, tallies.bucket_label(WAIT_BUCKETS, waited))] += 1
        out[(WAIT, queue_id, SUM)] += waited
    preemptions = list(window([EventType.PREEMPTED])
                       .values(q=F("workload__queue_id"), kind=KT("payload__kind"),
                               by=KT("payload__by"))
                       .annotate(n=Count("id")).order_by())
    by_ids = {int(row["by"]) for row in preemptions if str(row["by"] or "").isdigit()}
    queue_of = dict(Workload.objects.filter(pk__in=by_ids).values_list("pk", "queue_id"))
    for row in preemptions:
        by = str(row["by"] or "")
        preemptor_queue = queue_of.get(int(by), row["q"]) if by.isdigit() else row["q"]
        out[(PREEMPTED, preemptor_queue, row["kind"] or "")] += row["n"]
        out[(EVICTED, row["q"], EVICTIONS[EventType.PREEMPTED])] += row["n"]
    others = (window([EventType.TIMEOUT, EventType.REFUSED, EventType.RECLAIMED])
              .values("type", q=F("workload__queue_id"), state=KT("payload__state"),
                      cluster=KT("payload__cluster"), reason=KT("payload__reason"))
              .annotate(n=Count("id")).order_by())
    for row in others:
        if row["type"] == EventType.RECLAIMED and row["state"] == WorkloadState.PENDING:
            continue  # stuck while pending: it held nothing
        out[(EVICTED, row["q"], EVICTIONS[row["type"]])] += row["n"]
        if row["type"] == EventType.REFUSED:
            out[(REFUSED, 0, f"{row['cluster'] or ''}|{row['reason'] or ''}")] += row["n"]
    return out
