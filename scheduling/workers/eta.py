"""Start forecasts of pending work on the database: the live snapshot (every pending workload,
not only the heads a cycle reads) fast-forwarded through the engine (`engine.forecast`), with
run times from duration hints and from the history of finished runs.

`estimates_refresh` (the task `scheduling.eta_refresh`, on the beat) stores one
`WorkloadEstimate` per pending workload, so pages and the API read a row; `request_estimate`
is the same computation for a request not submitted yet (the request form).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from core import db
from scheduling import engine
from scheduling.engine.calibration import Calibration
from scheduling.engine.calibration import apply as calibrated
from scheduling.engine.forecast import (
    LIVE_FREE_LEVELS,
    LIVE_LEVELS,
    LIVE_PAD,
    LIVE_START_STAT,
    POINT,
    RECENT_RUNS,
    Estimate,
    Known,
    RunTimes,
    estimate,
    quantile,
)
from scheduling.models import (
    ASSUMES_MAX,
    Admission,
    EndReason,
    Workload,
    WorkloadEstimate,
    WorkloadState,
)
from scheduling.selectors import ETA_REFRESHED_KEY
from scheduling.workers.eta_calibration import calibration_read, first_estimates_store
from scheduling.workers.rows import SnapshotParts
from scheduling.workers.snapshot import arrival_specs, build_snapshot, dt

logger = logging.getLogger(__name__)

# Every pending workload of a leaf (the cycle reads the first `max_pending_per_queue`).
ALL_PENDING = 10_000_000
HISTORY_ROWS = 100_000
NO_NEW_WORK = "no new work goes ahead of it"
ASSUMED = ("the fleet and the quotas stay as they are; the range is over run times from "
           "their 25th to their 95th percentile, its earliest with no new work, widened by "
           "the forecast's resolution (2% of the time ahead); the start is the median of the "
           "starts simulated")


def period(seconds: float) -> str:
    """A period in words: "day", "2 days", "hour", else `span`."""
    for unit, name in ((86400, "day"), (3600, "hour")):
        n = seconds / unit
        if n == int(n) and (unit == 86400 or n < 24):
            return name if n == 1 else f"{int(n)} {name}s"
    return span(seconds)


def coming_text(arrivals_s: float, count: int, repeat: int = 1) -> str:
    """What the forecast takes the coming demand to be, in words (`count` submissions in the
    last `arrivals_s`, coming again `repeat` times)."""
    if arrivals_s <= 0 or repeat <= 0:
        return NO_NEW_WORK
    last = period(arrivals_s)
    if repeat == 1:
        return (f"new work comes as in the last {last} ({count} submissions, each again "
                f"{_a(last)} after it was made)")
    return (f"new work comes in each of the next {repeat} periods as in the last {last} "
            f"({count} submissions, each again {_a(last)}, {period(2 * arrivals_s)}, ... after "
            f"it was made)")


def _a(period_words: str) -> str:
    return {"day": "a day", "hour": "an hour"}.get(period_words, period_words)


@dataclass
class EtaReport:
    """What one refresh did (`skipped`: nothing changed since the last one)."""

    skipped: bool = False
    pending: int = 0
    estimated: int = 0  # with a start within the horizon
    seconds: float = 0.0
    forecast_seconds: float = 0.0
    store: StoreReport | None = None  # what writing the estimates did


def runtimes_read(now: datetime) -> RunTimes:
    """Run times (from running to finished) of the runs that finished in the last
    `history_days`, per leaf queue and over the fleet, with the configured default."""
    conf = settings.ALLOT_ETA
    since = now - timedelta(days=float(conf["history_days"]))
    rows = (Admission.objects.filter(end_reason=EndReason.FINISHED, ended_at__gte=since,
                                     running_at__isnull=False)
            .order_by("-ended_at").values_list("workload__queue__path", "running_at",
                                               "ended_at", "workload__progress_s")
            [:HISTORY_ROWS])
    by_queue: dict[str, list[float]] = defaultdict(list)  # newest first
    for path, running_at, ended_at, _progress in rows:
        if running_at is None or ended_at is None:
            continue
        by_queue[path].append(max(0.0, (ended_at - running_at).total_seconds()))
    fleet = sorted(x for xs in by_queue.values() for x in xs)
    return RunTimes(by_queue={p: tuple(sorted(xs)) for p, xs in by_queue.items()},
                    fleet=tuple(fleet), default_s=float(conf["default_run_s"]),
                    min_samples=int(conf["min_samples"]),
                    recent={p: tuple(sorted(xs[:RECENT_RUNS])) for p, xs in by_queue.items()})


def known_of(snap: engine.Snapshot, parts: SnapshotParts, now: datetime) -> dict[str, Known]:
    """Each workload's duration hint, progress and, when admitted, how long it has run."""
    out: dict[str, Known] = {}
    for name, r in parts.rows.items():
        hint = r.get("duration_hint_s")
        adm = parts.admissions.get(name)
        elapsed = 0.0
        if adm is not None and adm.running_at is not None:
            elapsed = max(0.0, (now - adm.running_at).total_seconds())
        out[name] = Known(hint_s=None if hint is None else float(hint),
                          progress_s=float(r.get("progress_s") or 0.0), elapsed_s=elapsed)
    return out


def span(seconds: float) -> str:
    """A duration in words: 45 s, 12 min, 3.5 h, 2.1 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def assumes_text(queue: str, runtimes: RunTimes, factor: float = 1.0,
                 coming: str = NO_NEW_WORK, long_wait_s: float | None = None) -> str:
    """What a forecast in `queue` assumes, in one line (`coming`: `coming_text`;
    `long_wait_s`: `forecast.estimate`'s)."""
    xs, source = runtimes.samples(queue)
    if source == "default":
        runs = f"without a hint, {span(runtimes.default_s)} (too few finished runs to learn from)"
    else:
        where = f"{queue}'s" if source == "queue" else "the fleet's"
        runs = (f"without a hint, {where} last {len(xs)} runs (p25 {span(quantile(xs, 0.25))}, "
                f"median {span(quantile(xs, 0.5))}, p75 {span(quantile(xs, 0.75))})")
        latest = runtimes.recent.get(queue, ())
        if len(latest) >= runtimes.min_samples:
            runs += (f"; the start takes the mean of the latest {len(latest)} "
                     f"({span(sum(latest) / len(latest))})")
    text = f"Run times: duration hints where given; {runs}. Assumes {coming}; {ASSUMED}"
    if long_wait_s:
        text += (f"; a start {_a(period(long_wait_s))} or more away moves halfway to the one "
                 "with the runs ahead at their mean")
    text += "."
    if factor != 1.0:
        text += f" Wait scaled x{factor:.2f}, as the latest forecasts here came out."
    return text


@dataclass
class Forecast:
    """One forecast: the estimates (calibrated), the same as simulated (`raw`), the run times
    and the calibration used."""

    estimates: dict[str, Estimate]
    raw: dict[str, Estimate]
    runtimes: RunTimes
    calibration: Calibration
    coming: str = NO_NEW_WORK  # `coming_text`
    long_wait_s: float | None = None  # `forecast.estimate`'s

    def assumes(self, queue: str) -> str:
        """What a forecast in `queue` assumes, in one line (at most `ASSUMES_MAX` characters:
        `clipped`)."""
        return clipped(assumes_text(queue, self.runtimes, self.calibration.of(queue),
                                    self.coming, self.long_wait_s), ASSUMES_MAX)


def clipped(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at the end of a clause ("; " or ". "), with a
    full stop (mid-word only when no clause ends early enough)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind("; ", 0, limit), text.rfind(". ", 0, limit))
    return text[:cut] + "." if cut > 0 else text[:limit - 1] + "…"


def forecast(snap: engine.Snapshot, parts: SnapshotParts, now: datetime,
             targets: set[str] | None = None, extra: dict[str, Known] | None = None,
             ) -> Forecast:
    """The snapshot's pending workloads' (or the targets') estimates, each start scaled by
    its queue's calibration (`eta_calibration`)."""
    runtimes = runtimes_read(now)
    known = known_of(snap, parts, now)
    known.update(extra or {})
    conf = settings.ALLOT_ETA
    window, repeat = float(conf.get("arrivals_s", 0.0)), int(conf.get("arrivals_repeat", 1))
    arrivals, hints = arrival_specs(now, window, parts, limit=int(conf.get("arrivals_max", 0)),
                                    repeat=repeat)
    for name, hint in hints.items():
        known[name] = Known(hint_s=hint)
    long_s = float(conf.get("long_wait_s", 0.0))
    long_wait_s = long_s if long_s > 0 else None  # 0: never
    raw = estimate(snap, known=known, runtimes=runtimes, horizon_s=float(conf["horizon_s"]),
                   targets=targets, step_s=float(conf["step_s"]),
                   step_rel=float(conf["step_rel"]), levels=LIVE_LEVELS,
                   start_stat=LIVE_START_STAT, point=float(conf.get("start_point", POINT)),
                   start_levels=tuple(conf.get("start_levels") or ()) or None,
                   arrivals=arrivals, long_wait_s=long_wait_s,
                   free_levels=LIVE_FREE_LEVELS, pad=LIVE_PAD)
    cal = calibration_read(now)
    queues = {w.name: w.queue for w in snap.pending}
    est = {name: calibrated(e, snap.now, cal.of(queues[name])) for name, e in raw.items()}
    return Forecast(estimates=est, raw=raw, runtimes=runtimes, calibration=cal,
                    coming=coming_text(window, len(arrivals) // max(1, repeat), repeat),
                    long_wait_s=long_wait_s)


# The last refresh's view of the database: every state change writes an event row, so the
# newest event id says whether anything moved. Ages count too, so a refresh is done anyway
# after REFRESH_ANYWAY_S.
FINGERPRINT_KEY = "scheduling:eta:fingerprint"
REFRESHED_KEY = ETA_REFRESHED_KEY
REFRESH_ANYWAY_S = 600


def _fingerprint() -> tuple[int, int]:
    from django.db.models import Max

    from scheduling.models import WorkloadEvent

    return (WorkloadEvent.objects.aggregate(m=Max("id"))["m"] or 0,
            Admission.objects.aggregate(m=Max("id"))["m"] or 0)


def estimates_refresh(*, now: datetime | None = None, force: bool = False) -> EtaReport:
    """Forecast every pending workload's start and store it (replacing the last forecast);
    skipped when nothing changed since the last refresh (less than REFRESH_ANYWAY_S ago)
    unless `force`."""
    started = time.monotonic()
    now = now or timezone.now()
    mark = _fingerprint()
    if not force and cache.get(FINGERPRINT_KEY) == list(mark):
        return EtaReport(skipped=True)
    snap, parts = build_snapshot(now, pending_limit=ALL_PENDING, record=False)
    t0 = time.monotonic()
    fc = forecast(snap, parts, now)
    report = EtaReport(pending=len(snap.pending), forecast_seconds=time.monotonic() - t0)
    texts: dict[str, str] = {}
    rows = []
    first: dict[int, datetime] = {}
    for w in snap.pending:
        e = fc.estimates.get(w.name)
        if e is None:
            continue
        raw = fc.raw[w.name].start
        if raw is not None:
            first[int(w.name)] = dt(raw)
        if w.queue not in texts:
            texts[w.queue] = fc.assumes(w.queue)
        report.estimated += e.start is not None
        rows.append(WorkloadEstimate(
            workload_id=int(w.name), start=_at(e.start), low=_at(e.low), high=_at(e.high),
            assumes=texts[w.queue], computed_at=now))
    conf = settings.ALLOT_ETA
    report.store = estimates_store(rows, now=now, step_s=float(conf["step_s"]),
                                   step_rel=float(conf["step_rel"]), first=first)
    cache.set(FINGERPRINT_KEY, list(mark), REFRESH_ANYWAY_S)
    cache.set(REFRESHED_KEY, now.isoformat(), None)
    report.seconds = time.monotonic() - started
    return report


@dataclass
class StoreReport:
    """What writing one forecast did: rows inserted (new pending work), updated (their
    estimate moved by more than the forecast's resolution), deleted (no longer pending),
    left as they were; the statements sent and the seconds it took."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    statements: int = 0
    seconds: float = 0.0


def _moved(old: datetime | None, new: datetime | None, now: datetime, step_s: float,
           step_rel: float) -> bool:
    """Whether a stored time differs from the new forecast's by more than its resolution
    (`max(step_s, step_rel x time ahead)`, engine.forecast.fast_forward): within it the
    two forecasts say the same."""
    if old is None or new is None:
        return (old is None) != (new is None)
    ahead = max(0.0, (new - now).total_seconds())
    return abs((new - old).total_seconds()) > max(step_s, step_rel * ahead, 1.0)


def estimates_store(rows: list[WorkloadEstimate], *, now: datetime, step_s: float = 0.0,
                    step_rel: float = 0.0, first: Mapping[int, datetime] | None = None
                    ) -> StoreReport:
    """Make the stored estimates the forecast `rows` (one per workload pending in the
    snapshot): in one transaction, one SELECT of the stored rows and of the workloads still
    pending, one DELETE of the rows of workloads no longer pending (or no longer in the
    forecast), one UPDATE of the rows whose estimate moved by more than the resolution
    (`_moved`; on PostgreSQL joined to arrays, elsewhere bulk_update in batches), one COPY
    of the new rows. Rows that did not move keep their `computed_at` (the time of the
    forecast that last moved them; `REFRESHED_KEY` holds the latest refresh's). `first`
    (workload id -> start before calibration): the new rows' workloads that have no first
    forecast yet get this one (one more statement, `first_estimates_store`)."""
    t0 = time.monotonic()
    out = StoreReport()
    counted = _Counter()
    with transaction.atomic(), connection.execute_wrapper(counted):
        ids = [r.workload_id for r in rows]
        still = set(Workload.objects.filter(pk__in=ids, state=WorkloadState.PENDING)
                    .values_list("pk", flat=True)) if ids else set()
        stored = {r[0]: r[1:] for r in WorkloadEstimate.objects.values_list(
            "workload_id", "start", "low", "high", "assumes")}
        gone = [wid for wid in stored if wid not in still]
        if gone:
            where, params = db.any_of('"workload_id"', gone)
            with connection.cursor() as cursor:
                cursor.execute(f'DELETE FROM "{WorkloadEstimate._meta.db_table}" WHERE {where}',
                               params)
            out.deleted = len(gone)
        new, moved = [], []
        for r in rows:
            if r.workload_id not in still:
                continue
            old = stored.get(r.workload_id)
            if old is None:
                new.append(r)
            elif old[3] != r.assumes or any(
                    _moved(a, b, now, step_s, step_rel)
                    for a, b in zip(old[:3], (r.start, r.low, r.high), strict=True)):
                moved.append(r)
            else:
                out.unchanged += 1
        _update_estimates(moved)
        db.insert_rows(WorkloadEstimate, new)
        if first:
            first_estimates_store({r.workload_id: first[r.workload_id] for r in new
                                   if r.workload_id in first}, now=now)
        out.inserted, out.updated = len(new), len(moved)
    out.statements = counted.n + (1 if new and db.postgres() else 0)  # COPY is not wrapped
    out.seconds = time.monotonic() - t0
    return out


class _Counter:
    """A connection.execute_wrapper counting the statements sent (executemany: one each)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        self.n += len(params) if many and params is not None else 1
        return execute(sql, params, many, context)


ESTIMATE_FIELDS = ["start", "low", "high", "assumes", "computed_at"]


def _update_estimates(rows: list[WorkloadEstimate]) -> None:
    """Write the estimate fields of stored rows (by workload): one UPDATE joined to arrays
    on PostgreSQL; elsewhere bulk_update in batches of 500 (by primary key, read first)."""
    if not rows:
        return
    if not db.postgres():
        pks = dict(WorkloadEstimate.objects.filter(
            workload_id__in=[r.workload_id for r in rows]).values_list("workload_id", "pk"))
        for r in rows:
            r.pk = pks[r.workload_id]
        WorkloadEstimate.objects.bulk_update(rows, ESTIMATE_FIELDS, batch_size=500)
        return
    table = WorkloadEstimate._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" t SET "start" = d.s, "low" = d.l, "high" = d.h, '
            '"assumes" = d.a, "computed_at" = d.c FROM unnest(%s::bigint[], '
            '%s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::text[], '
            '%s::timestamptz[]) AS d(w, s, l, h, a, c) WHERE t."workload_id" = d.w',
            [[r.workload_id for r in rows], [r.start for r in rows], [r.low for r in rows],
             [r.high for r in rows], [r.assumes for r in rows],
             [r.computed_at for r in rows]])


def _at(value: float | None) -> datetime | None:
    return None if value is None else dt(value)


@dataclass
class RequestEstimate:
    """A request's forecast start before it is submitted (datetimes; None: beyond the
    horizon), and what it assumes."""

    start: datetime | None
    low: datetime | None
    high: datetime | None
    assumes: str


def request_estimate(*, spec: engine.WorkloadSpec, hint_s: float | None,
                     now: datetime) -> RequestEstimate:
    """The forecast of `estimates_refresh` with one more pending workload, `spec` (named
    anything not a workload id), as if submitted now."""
    snap, parts = build_snapshot(now, pending_limit=ALL_PENDING, record=False)
    snap = replace(snap, pending=(*snap.pending, spec))
    fc = forecast(snap, parts, now, targets={spec.name},
                  extra={spec.name: Known(hint_s=hint_s)})
    e = fc.estimates[spec.name]
    return RequestEstimate(start=_at(e.start), low=_at(e.low), high=_at(e.high),
                           assumes=fc.assumes(spec.queue))
