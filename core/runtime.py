"""How the long-running processes (gunicorn's workers, Celery's) run Python's garbage
collector.

Python collects its youngest generation every 700 allocations net of frees, and each
collection of an older generation walks every object it holds. A portal process holds the
modules, settings and URL patterns it loaded at start, and a worker the rows and specs it keeps
between cycles: a cycle of the bench database spent 10-20% of its CPU collecting, a submission
5-25%. At start (after the app is loaded) these processes freeze what they hold (never
garbage: left out of every collection) and collect the youngest generation every
`ALLOT_GC_GEN0` allocations (50,000; 0 keeps Python's own thresholds). Garbage still goes:
reference counting frees almost everything, the collector only finds cycles, later.
"""

from __future__ import annotations

import gc
import os

DEFAULT_GEN0 = 50_000


def gc_tune() -> tuple[int, int, int]:
    """Freeze what this process holds and set the thresholds; returns them."""
    raw = os.environ.get("ALLOT_GC_GEN0", "").strip()
    try:
        gen0 = int(raw) if raw else DEFAULT_GEN0
    except ValueError as exc:
        raise ValueError(f"ALLOT_GC_GEN0 must be a whole number of allocations (got {raw!r})"
                         ) from exc
    if gen0 < 0:
        raise ValueError(f"ALLOT_GC_GEN0 must be 0 or more (got {gen0})")
    gc.collect()
    gc.freeze()
    if gen0:
        gc.set_threshold(gen0, 20, 100)
    return gc.get_threshold()  # type: ignore[return-value]
