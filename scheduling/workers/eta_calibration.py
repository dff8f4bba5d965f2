"""The start forecast's calibration on the database (`scheduling.engine.calibration`).

The ETA refresh keeps each workload's first forecast (`FirstEstimate`: when, and the start as
simulated, before any calibration) and reads them back with their actual starts (the first
admission's reservation) as the samples that scale new forecasts. The replay runner keeps the
same records in memory (scheduling/replay/eta.py), so both compute the same factor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import OuterRef, Subquery

from core import db
from scheduling.engine.calibration import NONE, Calibration, Outcome, calibration
from scheduling.models import Admission, FirstEstimate

# At most this many due first forecasts are read (newest first): each queue takes its latest
# `calibration_samples`, so this bounds the read, not the samples of a busy queue.
SAMPLE_ROWS = 20_000


def outcomes_read(now: datetime) -> dict[str, list[Outcome]]:
    """Per leaf queue, the first forecasts due by `now` (start at or before it, within the
    last `history_days`) with their actual starts (None: not admitted since)."""
    since = now - timedelta(days=float(settings.ALLOT_ETA["history_days"]))
    # the first admission at or after the forecast (one before it ran before a preemption)
    first_admit = (Admission.objects.filter(workload=OuterRef("workload"),
                                            reserved_at__gte=OuterRef("made_at"))
                   .order_by("reserved_at").values("reserved_at")[:1])
    rows = (FirstEstimate.objects.filter(start__lte=now, start__gte=since)
            .annotate(actual=Subquery(first_admit)).order_by("-start")
            .values_list("workload__queue__path", "made_at", "start", "actual")[:SAMPLE_ROWS])
    out: dict[str, list[Outcome]] = defaultdict(list)
    for path, made_at, start, actual in rows:
        out[path].append(Outcome(at=made_at.timestamp(), start=start.timestamp(),
                                 actual=None if actual is None else actual.timestamp()))
    return dict(out)


def calibration_read(now: datetime) -> Calibration:
    """The factors for forecasts made at `now` (`ALLOT_ETA_CALIBRATE` off: none)."""
    conf = settings.ALLOT_ETA
    if not conf["calibrate"]:
        return NONE
    return calibration(outcomes_read(now), now.timestamp(),
                       samples=int(conf["calibration_samples"]),
                       min_samples=int(conf["min_samples"]),
                       band=float(conf["calibration_band"]),
                       window_s=float(conf["history_days"]) * 86400.0)


def first_estimates_store(starts: Mapping[int, datetime], *, now: datetime) -> None:
    """Keep `starts` (workload id -> forecast start, before calibration) as the first forecast
    of the workloads that have none yet: one INSERT ... ON CONFLICT DO NOTHING on PostgreSQL
    (from arrays), elsewhere bulk_create ignoring conflicts."""
    if not starts:
        return
    if not db.postgres():
        FirstEstimate.objects.bulk_create(
            [FirstEstimate(workload_id=w, made_at=now, start=s) for w, s in starts.items()],
            ignore_conflicts=True, batch_size=1000)
        return
    table = FirstEstimate._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" ("workload_id", "made_at", "start") '
            'SELECT d.w, %s, d.s FROM unnest(%s::bigint[], %s::timestamptz[]) AS d(w, s) '
            'ON CONFLICT ("workload_id") DO NOTHING',
            [now, list(starts), list(starts.values())])
