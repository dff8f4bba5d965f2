"""Pacing of the cycles that submissions ask for.

Every commit that may change a decision nudges a cycle (`enqueue.cycle_nudge`, debounced per
web process). Under a storm of submissions the nudges keep the cycle running back to back: a
cycle reads every pending head and admitted workload, so it takes a whole core from the
portal that is taking the submissions. A nudged cycle therefore starts no sooner than `pace`
times the last cycle's duration after it ended (`ALLOT_CYCLE_PACE`, default 2: the cycle takes
at most a third of a core; with 1, half a core, 200 clients on two cores got 115-153
submissions a second through, against 189-215 with 2); a nudge that comes earlier is dropped,
and one nudge is queued for the moment the pause ends, whichever process asks first. The
beat's periodic cycle and the cycles run when capacity comes back are never paced.

The last cycle's end and duration are one row (`CycleMark`), shared by every worker process.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from scheduling import enqueue
from scheduling.models import CycleMark

_MARK = 1


def cycle_mark(*, ended_at: datetime, seconds: float,
               guarantee_blocked: Sequence[str] = ()) -> None:
    """Note a cycle that ran (after its transaction): its end and duration, and the leaves
    whose guarantee it left blocked (for /metrics)."""
    blocked = list(guarantee_blocked)
    if not CycleMark.objects.filter(pk=_MARK).update(ended_at=ended_at, seconds=seconds,
                                                     guarantee_blocked=blocked):
        CycleMark.objects.get_or_create(pk=_MARK, defaults={
            "ended_at": ended_at, "seconds": seconds, "guarantee_blocked": blocked})


def cycle_paced(now: datetime | None = None) -> bool:
    """True if a nudged cycle must wait (its nudge is dropped, and one is queued for the end
    of the pause unless one already is)."""
    pace = float(settings.ALLOT_WORKERS.get("cycle_pace", 0.0))
    if pace <= 0:
        return False
    mark = CycleMark.objects.filter(pk=_MARK).values_list("ended_at", "seconds").first()
    if mark is None or mark[0] is None:
        return False
    now = now or timezone.now()
    due = mark[0] + timedelta(seconds=pace * mark[1])
    if now >= due:
        return False
    if CycleMark.objects.filter(pk=_MARK).filter(
            Q(deferred_until__isnull=True) | Q(deferred_until__lt=now)).update(
            deferred_until=due):
        enqueue.cycle_nudge_at(due)
    return True
