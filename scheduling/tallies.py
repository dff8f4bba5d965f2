"""The running totals behind /metrics' counters and histograms (`MetricTally` rows).

A histogram is kept as one row per bucket that holds observations (counts per bucket, not
cumulated: an observation adds 1 to one row) and one `sum` row; /metrics cumulates them
(scheduling/monitoring.py). Additions go through one INSERT ... ON CONFLICT DO UPDATE, so
two processes adding at once both count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core import db
from scheduling.models import MetricTally

# The scheduling cycle's duration in seconds (from a small fleet's milliseconds to a large
# one's seconds).
CYCLE = "cycle_seconds"
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# From submission (or the last requeue) to admission: Kueue's buckets for its
# admission_wait_time_seconds (1 s, then 2.5 s doubling up to 10,240 s).
WAIT_BUCKETS = (1.0, *(2.5 * 2 ** k for k in range(13)))
SUM = "sum"
# Per cluster (the label): workloads whose orphaned objects the sweep deleted (fleet/orphans.py).
ORPHANS = "orphans_deleted"
INF = "+Inf"

Series = tuple[str, int, str]  # (family, queue id or 0, label)


def bucket_label(buckets: Sequence[float], value: float) -> str:
    """The label of the bucket `value` falls in: the smallest bound >= value, else +Inf."""
    for bound in buckets:
        if value <= bound:
            return le_text(bound)
    return INF


def le_text(bound: float) -> str:
    """A bucket bound as its `le` label reads (Prometheus' own form: 1.0, 2.5, 10240.0)."""
    return repr(float(bound))


def tallies_add(amounts: Iterable[tuple[Series, float]]) -> None:
    """Add each amount to its series' total (created at 0 when new)."""
    db.upsert_add(MetricTally, ("family", "queue_id", "label"), "value",
                  [(family, queue_id, label, amount)
                   for (family, queue_id, label), amount in amounts if amount])


def cycle_observe(seconds: float) -> None:
    """Count one scheduling cycle of `seconds` in the cycle-duration histogram."""
    tallies_add([((CYCLE, 0, bucket_label(CYCLE_BUCKETS, seconds)), 1.0),
                 ((CYCLE, 0, SUM), seconds)])
