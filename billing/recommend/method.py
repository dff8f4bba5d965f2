"""The recommendation method, pure (no database: bench/recommend.py runs it on a trace).

Input, per sibling queue of one key (flavor/resource), a leaf or a parent: its hourly demand
over the window (the mean amount used plus the mean amount of its work pending, each hour; a
parent's is its subtree's), its hourly use, its current min and max; and the capacity its
guarantees share: the parent's *proposed* min (the tree is proposed top-down, so each group of
children fits its parent's proposal), or the fleet's amount of the key for a top-level queue.
Amounts are in the key's unit (GPUs, cores, GiB, a count of slices); "GPU" below stands for it.

- active hours: the hours with any demand. A guarantee left unused is lent to the others
  (reclaimed when its queue needs it), so idle hours do not argue against one; what it has to
  cover is the demand while the team works;
- proposed min: the `min_percentile` (default 50th) of the demand over the active hours,
  rounded up to a whole GPU: what the team asks at least half of the time it asks at all;
- proposed max: the `max_percentile` (default 95th) of the demand over the active hours,
  rounded up, at least the proposed min and the largest job the queue submitted in the window
  (a max below it would refuse that job outright), and at most the capacity's ceiling (the
  parent's max, or the fleet);
- never below the queue's `floor`: its `lendable` (what of its min it lends: a capacity
  request changes min and max only, and the tree refuses a lendable above the min) and, for a
  parent, its children's floors added up (their mins cannot go lower, and must fit in it);
- a queue without demand in the window: min 0 (or its floor), its max as it is (nothing says
  what its peak is), at most the ceiling;
- fit: when the siblings' proposed mins add up to more than the capacity, every min is scaled
  down in proportion (whole GPUs, largest remainder), as the tree requires (V2: children's mins
  within their parent's min); and when the exclusive parts (min - lendable) of the siblings
  that set a lendable add up to more than `exclusive_capacity` (the parent's proposed min less
  its lendable), those parts are scaled down the same way (V4). Every max is at most the
  ceiling (V3: the parent's proposed max).

Evidence: the demand's 50th and 90th percentile for each hour of the day (UTC) and each day of
the week, the GPU-hours demanded, used and pending, the GPU-hours borrowed (used above the
current min) and lent (what other queues of the key borrowed, up to the siblings' unused
min, credited to each idle sibling in proportion to its unused min: the lenders' hours add up
to the hours borrowed from them), and how many hours the demand was above the current and the
proposed min and max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Below this many GPUs an hour counts as idle (rounding dust of the metering).
ACTIVE_GPUS = 0.01
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass
class QueueHistory:
    """One leaf's hourly series for one key over the window (same length as the hours)."""

    path: str
    demand: list[float]
    used: list[float]
    current_min: float
    current_max: float | None
    lendable: float | None = None
    largest_job: float = 0.0
    floor: float = 0.0


@dataclass
class Recommendation:
    """A proposed min and max for one queue and key, with the evidence behind it."""

    path: str
    current_min: float
    current_max: float | None
    min: int
    max: int | None
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.min != self.current_min or self.max != self.current_max


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def split(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Whole numbers in proportion to the weights adding up to `total` (largest remainder)."""
    wsum = sum(weights.values())
    if wsum <= 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / wsum for k, w in weights.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    rest = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (out[k] - exact[k], k))[:rest]:
        out[k] += 1
    return out


def profile(demand: list[float], hours: list[datetime]) -> dict[str, Any]:
    """The demand's p50 and p90 by hour of day and by day of week."""
    by_hour: list[list[float]] = [[] for _ in range(24)]
    by_day: list[list[float]] = [[] for _ in range(7)]
    for d, h in zip(demand, hours, strict=True):
        by_hour[h.hour].append(d)
        by_day[h.weekday()].append(d)
    return {
        "by_hour": [{"hour": i, "p50": round(percentile(v, 50), 2),
                     "p90": round(percentile(v, 90), 2)} for i, v in enumerate(by_hour)],
        "by_weekday": [{"day": WEEKDAYS[i], "p50": round(percentile(v, 50), 2),
                        "p90": round(percentile(v, 90), 2)} for i, v in enumerate(by_day)],
    }


def recommend(queues: list[QueueHistory], hours: list[datetime], *, capacity: float,
              ceiling: float | None = None, min_percentile: float = 50,
              max_percentile: float = 95, exclusive_capacity: float | None = None
              ) -> list[Recommendation]:
    """The proposal for sibling queues of one key that share `capacity` (module docstring)."""
    top = ceiling if ceiling is not None else capacity
    active = {q.path: [d for d in q.demand if d > ACTIVE_GPUS] for q in queues}
    floor = {q.path: math.ceil(max(q.lendable or 0, q.floor) - 1e-9) for q in queues}
    raw_min = {q.path: max(floor[q.path],
                           math.ceil(percentile(active[q.path], min_percentile) - 1e-9))
               for q in queues}
    total = sum(raw_min.values())
    mins = raw_min
    if total > capacity:
        extra = split(max(0, int(capacity) - sum(floor.values())),
                      {k: float(v - floor[k]) for k, v in raw_min.items()})
        mins = {k: floor[k] + extra[k] for k in raw_min}
    lend = {q.path: q.lendable for q in queues if q.lendable is not None}
    exclusive = {k: mins[k] - v for k, v in lend.items()}
    if exclusive_capacity is not None and sum(exclusive.values()) > exclusive_capacity + 1e-9:
        allowed = split(max(0, math.floor(exclusive_capacity + 1e-9)), exclusive)
        mins = {k: max(floor[k], math.floor(lend[k] + allowed[k] + 1e-9)) if k in lend else v
                for k, v in mins.items()}
    # What each hour the queues borrowed beyond their current min (to credit the lenders).
    borrowed_by: dict[str, list[float]] = {
        q.path: [max(0.0, u - q.current_min) for u in q.used] for q in queues}
    all_borrowed = [sum(col) for col in zip(*borrowed_by.values(), strict=True)] if queues else []
    # Each hour the borrowed total is credited to the idle siblings in proportion to their
    # unused min (the tree's rule, docs/quota-tree.md "Borrowed and lent", in GPU-hours), so
    # the lenders' hours add up to what was borrowed from them, not that once per lender.
    idle_by = {q.path: [max(0.0, q.current_min - u) for u in q.used] for q in queues}
    idle_pool = [sum(col) for col in zip(*idle_by.values(), strict=True)] if queues else []
    out = []
    for q in queues:
        p_max = math.ceil(percentile(active[q.path], max_percentile) - 1e-9)
        new_min = mins[q.path]
        new_max: int | None = int(max(new_min, min(max(p_max, math.ceil(q.largest_job - 1e-9)),
                                                   math.floor(top))))
        if not active[q.path]:
            # No demand in the window says nothing of its peak: the max stays.
            new_max = None if q.current_max is None else int(max(new_min, min(
                math.floor(q.current_max), math.floor(top))))
        lent = sum(idle * min(borrowed, pool) / pool
                   for idle, borrowed, pool in zip(idle_by[q.path], all_borrowed, idle_pool,
                                                   strict=True) if pool > 0)
        n = len(q.demand)
        evidence = {
            "hours": n,
            "active_hours": len(active[q.path]),
            "demand_gpu_hours": round(sum(q.demand), 1),
            "used_gpu_hours": round(sum(q.used), 1),
            "pending_gpu_hours": round(sum(q.demand) - sum(q.used), 1),
            "borrowed_gpu_hours": round(sum(borrowed_by[q.path]), 1),
            "lent_gpu_hours": round(lent, 1),
            "demand_percentiles": {str(p): round(percentile(q.demand, p), 2)
                                   for p in (25, 50, 75, 90, 95, 99)},
            "hours_above_current_min": sum(d > q.current_min for d in q.demand),
            "hours_above_current_max": sum(
                d > q.current_max for d in q.demand) if q.current_max is not None else 0,
            "hours_above_proposed_min": sum(d > new_min for d in q.demand),
            "hours_above_proposed_max": sum(
                d > new_max for d in q.demand) if new_max is not None else 0,
            "scaled_to_fit": total > capacity or new_min < raw_min[q.path],
            "largest_job_gpus": q.largest_job,
            "unscaled_min": raw_min[q.path],
            "floored_at_lendable": floor[q.path] > 0 and raw_min[q.path] == floor[q.path],
            **profile(q.demand, hours),
        }
        out.append(Recommendation(q.path, q.current_min, q.current_max, new_min, new_max,
                                  evidence))
    return out
