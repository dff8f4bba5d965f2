"""Start forecast: how long the forecast of every pending workload takes (the engine part of
the task `scheduling.eta_refresh`: four fast-forwards of the live snapshot, the start their
median, the range over them; with no new work, then with the last day's submissions coming
again a day, two and three days later and the starts a long wait away moved halfway to the
median level chained too, then as the live forecast takes them: the range's p25 fast-forward
with no new work and the range widened by half the resolution; then the calibration by 20,000
earlier first forecasts).

    python -m bench.eta                    # 20,000 pending workloads
    python -m bench.eta --pending 5000     # another size
    python -m bench.eta --repeat 3         # the last day's submissions again for 3 days
    python -m bench.eta --db               # and the database writes of a refresh (below)

The snapshot is built in memory (seeded): 50 leaf queues in 10 departments, 64 nodes of 8
GPUs, every GPU in use by running work (1, 2, 4 and 8 GPUs, a quarter with a duration hint),
N pending workloads of the same shapes spread over the queues, each queue with 200 past run
times drawn from a log-normal distribution (median 1 h). Prints the figures, then one line of
JSON (`{"bench": "eta", ...}`).

`--db`: the database side of storing those forecasts (`scheduling.workers.eta.estimates_store`)
on a throwaway PostgreSQL database (DATABASE_URL's server; BENCH_ETA_DB names it, default
`test_allot_bench_eta`) holding N pending workloads: statements sent and wall time of (1)
the first refresh (every row new), (2) a refresh where nothing moved, (3) one where 10% of
the estimates moved, one workload in 100 left and as many came, (4) one where all moved; and
what the same 20,000 rows cost written the ways compared: every row saved on its own
(`update_or_create`, timed on 2,000 and scaled), Django's `bulk_update` in batches of 500,
the old refresh (DELETE all, COPY all); and the calibration's records: the first forecasts
kept (`first_estimates_store`) and read back (`outcomes_read`). Statements are counted at the
connection (a COPY as one).
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

from scheduling.engine import (
    AdmittedWorkload,
    ClusterSpec,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    Snapshot,
    WorkloadSpec,
)
from scheduling.engine.calibration import Outcome, apply, calibration
from scheduling.engine.forecast import (
    LIVE_ARRIVALS_REPEAT,
    LIVE_ARRIVALS_S,
    LIVE_FREE_LEVELS,
    LIVE_LEVELS,
    LIVE_LONG_WAIT_S,
    LIVE_PAD,
    LIVE_START_STAT,
    POINT,
    Known,
    RunTimes,
    estimate,
    fast_forward,
    repeated,
    run_lengths,
)

FLAVOR = "a100-80g"
KEY = (FLAVOR, "gpu")
NODES = 64
GPUS = 8
DEPTS = 10
LEAVES_PER_DEPT = 5
NOW = 1_000_000.0
# The resolution the workers use (settings.ALLOT_ETA).
STEP_S = 60.0
STEP_REL = 0.02


def world(pending: int, seed: int = 7) -> tuple[Snapshot, dict[str, Known], RunTimes]:
    """The snapshot, what is known of each workload's run, and the run-time history."""
    rng = random.Random(seed)
    fleet = NODES * GPUS
    queues: list[QueueSpec] = []
    leaves: list[str] = []
    per_dept = fleet // DEPTS
    for d in range(DEPTS):
        dept = f"d{d}"
        queues.append(QueueSpec(dept, None, {KEY: KeyQuota(per_dept, fleet, per_dept)}))
        for i in range(LEAVES_PER_DEPT):
            leaf = f"{dept}/q{i}"
            share = per_dept // LEAVES_PER_DEPT
            queues.append(QueueSpec(leaf, dept, {KEY: KeyQuota(share, fleet, share)}))
            leaves.append(leaf)
    nodes = tuple(NodeSpec(f"n{i}", FLAVOR, GPUS, 96, 1024, f"r{i // 16}") for i in range(NODES))
    known: dict[str, Known] = {}
    admitted: list[AdmittedWorkload] = []
    seq = 0
    for i, node in enumerate(nodes):
        free = GPUS
        while free:
            g = min(free, rng.choice((1, 2, 4, 8)))
            free -= g
            seq += 1
            leaf = leaves[(i + seq) % len(leaves)]
            name = f"r{seq}"
            spec = WorkloadSpec(name, leaf, (PodSetSpec(1, (FLAVOR,), g, 4 * g, 32 * g),),
                                submitted_at=NOW - 7200)
            admitted.append(AdmittedWorkload(spec, "c", FLAVOR, (node.name,), True,
                                             NOW - 3600, admission_seq=seq))
            elapsed = rng.uniform(0, 7200)
            hint = elapsed + rng.uniform(60, 14_400) if rng.random() < 0.25 else None
            known[name] = Known(hint_s=hint, elapsed_s=elapsed)
    waiting: list[WorkloadSpec] = []
    for j in range(pending):
        g = rng.choice((1, 1, 1, 2, 4, 8))
        name = f"p{j}"
        waiting.append(WorkloadSpec(name, rng.choice(leaves),
                                    (PodSetSpec(1, (FLAVOR,), g, 4 * g, 32 * g),),
                                    submitted_at=NOW - rng.uniform(0, 86_400)))
        if rng.random() < 0.25:
            known[name] = Known(hint_s=rng.uniform(300, 14_400))
    history = {leaf: tuple(sorted(rng.lognormvariate(8.2, 1.2) for _ in range(200)))
               for leaf in leaves}
    snap = Snapshot(now=NOW, queues=tuple(queues),
                    clusters=(ClusterSpec("c", nodes),), flavors=(FlavorSpec(FLAVOR, 80),),
                    pending=tuple(waiting), admitted=tuple(admitted))
    fleet_hist = tuple(sorted(x for xs in history.values() for x in xs))
    return snap, known, RunTimes(by_queue=history, fleet=fleet_hist)


def past_forecasts(snap: Snapshot, per_queue: int = 400, seed: int = 11
                   ) -> dict[str, list[Outcome]]:
    """A month of first forecasts per leaf queue (seeded): waits log-normal (median 1 h),
    actual waits the forecast's times a log-normal ratio (median 1.3), the latest still
    waiting."""
    rng = random.Random(seed)
    leaves = sorted({w.queue for w in snap.pending})
    out: dict[str, list[Outcome]] = {}
    for leaf in leaves:
        xs = []
        for _ in range(per_queue):
            at = NOW - rng.uniform(0, 30 * 86_400)
            wait = rng.lognormvariate(8.2, 1.0)
            actual = at + wait * rng.lognormvariate(0.26, 0.5)
            xs.append(Outcome(at=at, start=at + wait, actual=actual if actual <= NOW else None))
        out[leaf] = xs
    return out


def arrivals_of(snap: Snapshot, known: dict[str, Known], window_s: float, repeat: int
                ) -> list[WorkloadSpec]:
    """As the workers read them (scheduling.workers.snapshot.arrival_specs): the work submitted
    in the last `window_s` (pending and running), each again `repeat` times, the k-th
    k x `window_s` later, with the original's hint (added to `known`)."""
    recent = [w for w in (*snap.pending, *(a.workload for a in snap.admitted))
              if w.submitted_at > snap.now - window_s]
    copies = repeated(recent, window_s, repeat)
    for copy, of in copies:
        known[copy.name] = Known(hint_s=known.get(of, Known()).hint_s)
    return [copy for copy, _ in copies]


def main(argv: list[str]) -> int:
    pending = int(argv[argv.index("--pending") + 1]) if "--pending" in argv else 20_000
    snap, known, runtimes = world(pending)
    horizon = 14 * 86_400.0
    # Before the arrivals (no new work during the forecast), then with the last day's
    # submissions again for the next `--repeat` days (live: 3) and the long waits, then the
    # live forecast; side by side.
    c0, t0 = time.process_time(), time.perf_counter()
    est = estimate(snap, known=known, runtimes=runtimes, horizon_s=horizon, step_s=STEP_S,
                   step_rel=STEP_REL, levels=LIVE_LEVELS, start_stat=LIVE_START_STAT)
    wall0, cpu0 = time.perf_counter() - t0, time.process_time() - c0
    started0 = sum(e.start is not None for e in est.values())
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else LIVE_ARRIVALS_REPEAT
    arrivals = arrivals_of(snap, known, LIVE_ARRIVALS_S, repeat)
    c0, t0 = time.process_time(), time.perf_counter()
    est = estimate(snap, known=known, runtimes=runtimes, horizon_s=horizon, step_s=STEP_S,
                   step_rel=STEP_REL, levels=LIVE_LEVELS, start_stat=LIVE_START_STAT,
                   arrivals=arrivals, long_wait_s=LIVE_LONG_WAIT_S)
    wall1, cpu1 = time.perf_counter() - t0, time.process_time() - c0
    # The live forecast: the same, with the p25 fast-forward taking no new work and the range
    # widened by half the resolution (`estimate(free_levels=..., pad=...)`).
    c0, t0 = time.process_time(), time.perf_counter()
    est = estimate(snap, known=known, runtimes=runtimes, horizon_s=horizon, step_s=STEP_S,
                   step_rel=STEP_REL, levels=LIVE_LEVELS, start_stat=LIVE_START_STAT,
                   arrivals=arrivals, long_wait_s=LIVE_LONG_WAIT_S,
                   free_levels=LIVE_FREE_LEVELS, pad=LIVE_PAD)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    started = sum(e.start is not None for e in est.values())
    long_n = sum(len(e.starts) > 1 + len(LIVE_LEVELS) for e in est.values())
    one: dict[str, Any] = {}
    remaining, durations = run_lengths(snap, known, runtimes, POINT, mean=True)
    t1 = time.perf_counter()
    fast_forward(snap, remaining=remaining, durations=durations, horizon_s=horizon,
                 step_s=STEP_S, step_rel=STEP_REL)
    one["median_run_s"] = round(time.perf_counter() - t1, 2)
    # The calibration (scheduling.engine.calibration) on top: a month of first forecasts per
    # queue (20,000 in all), each queue's factor, every estimate scaled.
    outcomes = past_forecasts(snap)
    c1, t1 = time.process_time(), time.perf_counter()
    cal = calibration(outcomes, NOW, min_samples=runtimes.min_samples)
    queue_of = {w.name: w.queue for w in snap.pending}
    est = {n: apply(e, NOW, cal.of(queue_of[n])) for n, e in est.items()}
    cal_wall, cal_cpu = time.perf_counter() - t1, time.process_time() - c1
    spans = sorted((e.start - NOW) / 3600 for e in est.values() if e.start is not None)
    figures = {
        "bench": "eta", "pending": pending, "admitted": len(snap.admitted),
        "gpus": NODES * GPUS, "queues": len(snap.queues),
        "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "arrivals": len(arrivals),
        "arrivals_repeat": repeat,
        "no_arrivals_wall_s": round(wall0, 2), "no_arrivals_cpu_s": round(cpu0, 2),
        "range_before_wall_s": round(wall1, 2), "range_before_cpu_s": round(cpu1, 2),
        "long_waits": long_n,
        "no_arrivals_started_within_horizon": started0,
        "calibration_wall_s": round(cal_wall, 3), "calibration_cpu_s": round(cal_cpu, 3),
        "calibration_samples": sum(len(xs) for xs in outcomes.values()),
        "queues_scaled": sum(f != 1.0 for f in cal.by_queue.values()),
        "fast_forwards": 1 + len(LIVE_LEVELS), "one_fast_forward_s": one["median_run_s"],
        "started_within_horizon": started,
        "last_start_h": round(spans[-1], 1) if spans else None,
    }
    print(f"[eta] {pending} pending, {len(snap.admitted)} running on {NODES * GPUS} GPUs, "
          f"{len(snap.queues)} queues")
    print(f"[eta] forecast of every pending workload ({1 + len(LIVE_LEVELS)} fast-forwards), "
          f"no new work: {wall0:.2f} s wall, {cpu0:.2f} s CPU; {started0} start within the "
          f"horizon")
    moved = (f", and the starts {LIVE_LONG_WAIT_S / 3600:.0f} h or more away moved halfway to "
             f"the median level chained ({long_n} of them)" if LIVE_LONG_WAIT_S else "")
    print(f"[eta] the same with the last day's submissions coming again {repeat}x, "
          f"{len(arrivals)} in all{moved}: {wall1:.2f} s wall, "
          f"{cpu1:.2f} s CPU; one fast-forward without them {one['median_run_s']:.2f} s")
    print(f"[eta] and the range's p25 fast-forward with no new work, the range widened by half "
          f"the resolution (live): {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"[eta] calibration ({figures['calibration_samples']} first forecasts, "
          f"{figures['queues_scaled']} queues scaled): {cal_wall:.3f} s wall, "
          f"{cal_cpu:.3f} s CPU")
    print(f"[eta] {started} start within the 14-day horizon; the last at "
          f"+{figures['last_start_h']} h")
    if "--db" in argv:
        figures["db"] = db_figures(snap, est)
    print(json.dumps(figures))
    return 0


def db_figures(snap: Snapshot, est: dict[str, Any]) -> dict[str, Any]:
    """The database writes of storing `est` (module docstring)."""
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
    os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_ETA_DB", "test_allot_bench_eta")
    import django

    django.setup()
    from datetime import timedelta

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    from core import db
    from quotas.models import Queue
    from scheduling.models import PriorityClass, Workload, WorkloadEstimate
    from scheduling.workers.eta import _Counter, estimates_store
    from scheduling.workers.eta_calibration import first_estimates_store, outcomes_read

    settings.DEBUG = False
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False,
                                       keepdb=False)
    out: dict[str, Any] = {}
    try:
        now = timezone.now()
        leaf = Queue.objects.create(name="bench", namespace="bench")
        user = get_user_model().objects.create_user("bench", password="bench-pass-1")
        training, _ = PriorityClass.objects.get_or_create(name="training",
                                                          defaults={"value": 1000})
        Workload.objects.bulk_create([
            Workload(name=w.name, queue=leaf, owner=user, priority_class=training,
                     submitted_at=now, state_changed_at=now) for w in snap.pending],
            batch_size=5000)
        ids = list(Workload.objects.order_by("pk").values_list("pk", flat=True))

        def at(v: float | None) -> Any:
            return None if v is None else now + timedelta(seconds=v - NOW)

        def rows(shift: dict[int, float] | None = None, keep: list[int] | None = None
                 ) -> list[Any]:
            shift = shift or {}
            return [WorkloadEstimate(
                workload_id=pk, start=at(e.start + shift.get(i, 0) if e.start else None),
                low=at(e.low), high=at(e.high), assumes="bench", computed_at=now)
                for i, (pk, e) in enumerate(zip(ids, est.values(), strict=True))
                if keep is None or pk in keep]

        def timed(label: str, fn: Any) -> None:
            counted = _Counter()
            t0 = time.perf_counter()
            with connection.execute_wrapper(counted):
                res = fn()
            wall = time.perf_counter() - t0
            n = res.statements if res is not None else counted.n
            out[label] = {"statements": n, "wall_s": round(wall, 3)}
            if res is not None:
                out[label].update({"inserted": res.inserted, "updated": res.updated,
                                   "deleted": res.deleted, "unchanged": res.unchanged})

        n = len(ids)
        timed("first", lambda: estimates_store(rows(), now=now, step_s=STEP_S,
                                               step_rel=STEP_REL))
        # The calibration's records: every workload's first forecast kept (one statement),
        # then read back as samples once due (15 days on, every one due).
        starts = {pk: at(e.start) for pk, e in zip(ids, est.values(), strict=True)
                  if e.start is not None}
        timed("first_estimates_kept", lambda: first_estimates_store(starts, now=now))
        timed("first_estimates_read", lambda: (
            outcomes_read(now + timedelta(days=15)) and None))
        timed("none_moved", lambda: estimates_store(rows(), now=now, step_s=STEP_S,
                                                    step_rel=STEP_REL))
        tenth = {i: 3600.0 for i in range(0, n, 10)}
        left = set(ids[::100])
        Workload.objects.filter(pk__in=left).update(state="cancelled")
        came = [Workload(name=f"new{i}", queue=leaf, owner=user, priority_class=training,
                         submitted_at=now, state_changed_at=now) for i in range(len(left))]
        Workload.objects.bulk_create(came)
        new_ids = list(Workload.objects.filter(name__startswith="new").values_list(
            "pk", flat=True))
        base = [r for r in rows(tenth) if r.workload_id not in left]
        base += [WorkloadEstimate(workload_id=pk, start=now, low=now, high=now,
                                  assumes="bench", computed_at=now) for pk in new_ids]
        timed("tenth_moved", lambda: estimates_store(base, now=now, step_s=STEP_S,
                                                     step_rel=STEP_REL))
        moved_all = [WorkloadEstimate(workload_id=r.workload_id, start=r.start + timedelta(
            hours=2) if r.start else now, low=r.low, high=r.high, assumes=r.assumes,
            computed_at=now) for r in base]
        timed("all_moved", lambda: estimates_store(moved_all, now=now, step_s=STEP_S,
                                                   step_rel=STEP_REL))
        # The ways compared, on the rows of the work pending now (as many as before).
        full = [WorkloadEstimate(workload_id=r.workload_id, start=r.start, low=r.low,
                                 high=r.high, assumes=r.assumes, computed_at=now)
                for r in base]

        def old_refresh() -> None:
            with transaction.atomic():
                still = set(Workload.objects.filter(pk__in=[r.workload_id for r in full],
                                                    state="pending")
                            .values_list("pk", flat=True))
                WorkloadEstimate.objects.all().delete()
                db.insert_rows(WorkloadEstimate, [r for r in full if r.workload_id in still])
        timed("old_delete_all_copy_all", old_refresh)
        out["old_delete_all_copy_all"]["statements"] += 1  # the COPY
        stored = dict(WorkloadEstimate.objects.values_list("workload_id", "pk"))
        for r in full:
            r.pk = stored[r.workload_id]
            r.start = r.start + timedelta(hours=1) if r.start else now

        def bulk_update() -> None:
            with transaction.atomic():
                WorkloadEstimate.objects.bulk_update(
                    full, ["start", "low", "high", "assumes", "computed_at"], batch_size=500)
        timed("bulk_update_batches_of_500", bulk_update)
        sample = full[:2000]

        def per_row() -> None:
            with transaction.atomic():
                for r in sample:
                    WorkloadEstimate.objects.update_or_create(
                        workload_id=r.workload_id, defaults={
                            "start": r.start, "low": r.low, "high": r.high,
                            "assumes": r.assumes, "computed_at": now})
        timed("per_row_2000", per_row)
        scale = len(full) / len(sample)
        out["per_row_scaled"] = {k: round(v * scale, 3) if k == "wall_s" else int(v * scale)
                                 for k, v in out["per_row_2000"].items()}
    finally:
        connection.creation.destroy_test_db(settings.DATABASES["default"]["NAME"],
                                            verbosity=0)
    print(f"[eta] storing the estimates of {len(ids)} pending workloads (PostgreSQL):")
    for label, f in out.items():
        moved = (f" (inserted {f['inserted']}, updated {f['updated']}, deleted "
                 f"{f['deleted']}, unchanged {f['unchanged']})" if "inserted" in f else "")
        print(f"[eta]   {label:28} {f['statements']:>6} statements {f['wall_s']:>8.3f} s"
              f"{moved}")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
