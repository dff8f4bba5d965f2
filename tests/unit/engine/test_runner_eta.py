"""The runner's `eta_at_submit` (scheduling/replay/eta.py): the live forecast, made at each
submission, on hand-computed scenarios."""

from __future__ import annotations

import pytest

from scheduling.replay import EtaOptions, load_scenario, run_scenario

from .replay_builders import job, scenario

# Two 8-GPU nodes (BASE); queue a: min 8, max 16.
EXACT = EtaOptions(step_s=0, step_rel=0)


def run(workloads, until=5000, **opts):
    sc = load_scenario(scenario(until=until, workloads=workloads))
    return run_scenario(sc, eta=EtaOptions(**{"step_s": 0, "step_rel": 0, **opts}))["workloads"]


def test_with_hints_the_forecast_is_exact():
    # a1, a2 take both nodes at 0 (ending at 100 and 300); b (a's third, at a's max 16)
    # waits for a1's node: 100.
    out = run([job("a1", "a", 0, duration_s=100), job("a2", "a", 0, duration_s=300),
               job("b", "a", 10, duration_s=50)], hints=True)
    assert out["b"]["eta_at_submit"] == {"at": 10, "start": 100, "low": 100, "high": 100}
    assert out["b"]["admissions"][0]["at"] == 100
    assert out["a1"]["eta_at_submit"] == {"at": 0, "start": 0, "low": 0, "high": 0}


def test_without_hints_the_history_of_the_queue_decides():
    # Five runs of 200 s in queue a finish first (one after another on one node, the other
    # node busy with "long" until 2000); then c (a, 8 GPUs) is submitted at 1100 while "x"
    # (a) started at 1000: the forecast takes x's remaining time from a's history (all runs
    # 200 s: 100 s left), so c is forecast at 1100 + 100 = 1200, exactly when x ends.
    jobs = [job("long", "b", 0, duration_s=2000)]
    jobs += [job(f"r{i}", "a", 0, duration_s=200) for i in range(5)]
    jobs += [job("x", "a", 1000, duration_s=200), job("c", "a", 1100, duration_s=10)]
    out = run(jobs)
    assert out["x"]["admissions"][0]["at"] == 1000
    assert out["c"]["eta_at_submit"] == {"at": 1100, "start": 1200, "low": 1200, "high": 1200}
    assert out["c"]["admissions"][0]["at"] == 1200


def test_the_start_follows_the_queues_latest_runs():
    # Queue a's runs: ten of 1000 s (on one node, "long" holds the other until 20000), then
    # five of 100 s. x (a) starts at 10500; y (a) waits from 10505, c from 10510. x's end is
    # forecast by the month's rule (p75 of the runs longer than 10 s: 1000, so 11500); y runs
    # for the mean of a's latest ten (5 x 1000, 5 x 100: 550), so c at 12050. The old
    # forecast (recent_runs 0) takes the month's mean for y (15 runs: 700): 12200.
    jobs = [job("long", "b", 0, duration_s=20000)]
    jobs += [job(f"r{i}", "a", 0, duration_s=1000) for i in range(10)]
    jobs += [job(f"s{i}", "a", 10000, duration_s=100) for i in range(5)]
    jobs += [job("x", "a", 10500, duration_s=100), job("y", "a", 10505, duration_s=100),
             job("c", "a", 10510, duration_s=10)]
    mean_run = {"start_stat": "mean", "levels": (0.25, 0.95)}
    out = run(jobs, until=30000, **mean_run)
    assert out["x"]["admissions"][0]["at"] == 10500
    assert out["c"]["eta_at_submit"]["start"] == 12050
    old = run(jobs, until=30000, recent_runs=0, **mean_run)
    assert old["c"]["eta_at_submit"]["start"] == 12200
    # The live start: the median of the four simulated starts, at the mean runs (12050) and
    # at the runs' p25 (10700), p50 and p95 (both 12500): (12050 + 12500) / 2.
    live = run(jobs, until=30000)["c"]["eta_at_submit"]
    assert (live["low"], live["start"], live["high"]) == (10700, 12275, 12500)
    # record_starts keeps each fast-forward's start (mean runs, then p25, p50, p95).
    kept = run(jobs, until=30000, record_starts=True)["c"]["eta_at_submit"]
    assert kept == {**live, "starts": [12050, 10700, 12500, 12500]}


def test_no_history_uses_the_default_run_time():
    out = run([job("a1", "a", 0, duration_s=100), job("a2", "a", 0, duration_s=300),
               job("b", "a", 10, duration_s=50)], default_run_s=1000)
    # a1 and a2 have run 10 s of an assumed 1000: both end at 1000.
    assert out["b"]["eta_at_submit"]["start"] == 1000


def test_reclaim_is_forecast():
    # b is within its guarantee while a borrows b's 8: b reclaims, after a2's 30 s grace.
    out = run([job("a1", "a", 0, duration_s=100), job("a2", "a", 0, duration_s=300),
               job("b", "b", 10, duration_s=50)], hints=True)
    assert out["b"]["eta_at_submit"]["start"] == 40 == out["b"]["admissions"][0]["at"]


def test_every_nth_and_off_by_default():
    jobs = [job(f"j{i}", "a", i) for i in range(4)]
    out = run(jobs, every=2)
    assert [out[f"j{i}"]["eta_at_submit"] is not None for i in range(4)] == [
        True, False, True, False]
    plain = run_scenario(load_scenario(scenario(workloads=jobs)))["workloads"]
    assert "eta_at_submit" not in plain["j0"]


def test_history_keeps_the_latest_runs_by_size_when_asked():
    from scheduling.replay.eta import RunHistory

    h = RunHistory(EtaOptions(recent_runs=2, by_size=True))
    for at, gpus, run_s in [(10, 8, 500.0), (20, 1, 5.0), (30, 8, 700.0), (40, 8, 900.0)]:
        h.add("a", at, run_s, gpus)
    rt = h.runtimes(50)
    assert rt.recent_by_size == {("a", 8): (700.0, 900.0), ("a", 1): (5.0,)}
    assert rt.recent == {"a": (700.0, 900.0)}
    assert RunHistory(EtaOptions()).runtimes(0).recent_by_size == {}



def test_latest_runs_by_start_count_running_work_at_its_conditional_mean():
    # Studied, not adopted (docs/engine.md §13): queue a's finished runs (start, length):
    # 100 s from 0, 300 s from 50, 200 s from 400; r has run 250 s (started at 750): it
    # counts at the mean of the month's runs longer than 250 s (300) as the latest start.
    from scheduling.engine import AdmittedWorkload, FlavorSpec, Settings, Snapshot
    from scheduling.engine.forecast import Known
    from scheduling.replay.eta import RunHistory, recent_started
    from tests.unit.engine.builders import A100, cluster, q, wl

    h = RunHistory(EtaOptions(recent_runs=3, recent_started=True, min_samples=3))
    for end, run_s in [(100, 100.0), (350, 300.0), (600, 200.0)]:
        h.add("a", end, run_s)
    assert h.runtimes(1000).recent == {"a": (100.0, 200.0, 300.0)}
    r = AdmittedWorkload(wl("r", "a", 8, t=700), "c", A100, ("c-a100-80g-0",), False, 750.0,
                         running=True)
    snap = Snapshot(now=1000.0, queues=(q("a", 8, 8),), clusters=(cluster(nodes=1),),
                    flavors=(FlavorSpec(A100, 80),), pending=(), admitted=(r,),
                    settings=Settings(), cooldowns={})
    rt = recent_started(h, snap, {"r": Known(elapsed_s=250.0)}, h.runtimes(1000), 1000.0)
    # the latest three by start: r (750), the 200 s run (400), the 300 s one (50)
    assert rt.recent == {"a": (200.0, 300.0, 300.0)}
    # older than every run: as long again
    rt = recent_started(h, snap, {"r": Known(elapsed_s=400.0)}, h.runtimes(1000), 1000.0)
    assert rt.recent == {"a": (200.0, 300.0, 800.0)}

def h_then_j_then_c():
    """One 8-GPU node; in queue a h0..h4 at 0 (100 s each), j0..j4 at 1000 (1000 s each), c at
    1450 (the calibration case below)."""
    one_node = [{"name": "c", "nodes": [{"count": 1, "flavor": "a100-80g", "gpus": 8,
                                         "cpu": 96, "memory_gib": 1024}]}]
    jobs = [job(f"h{i}", "a", 0, duration_s=100) for i in range(5)]
    jobs += [job(f"j{i}", "a", 1000, duration_s=1000) for i in range(5)]
    jobs += [job("c", "a", 1450, duration_s=10)]
    return load_scenario(scenario(until=20000, workloads=jobs, clusters=one_node))


def test_calibration_scales_by_how_the_queues_earlier_forecasts_came_out():
    # One 8-GPU node. h0..h4 (100 s each, at 0): with no history every run is the default
    # 100 s, so h1..h4 are forecast at 100..400 and start then (ratio 1). j0..j4 (at 1000)
    # run 1000 s each, but the history says 100: j1..j4 are forecast at 1100..1400 and start
    # at 2000..5000. At 1450, c's four simulated starts: j0 (run 450 s, longer than every
    # past run) ends at 450 x 3 = 1350 s on (p75; p25: 150, p50: 450, p95: 8550), then
    # j1..j4 take 100 s each: 3200 (mean-run), 2000, 2300, 10400; the start their median,
    # 2750. The latest four due forecasts, j1..j4, waited 450 s so far: ratios 4.5, 2.25,
    # 1.5, 1.125, median 1.875: c's wait of 1300 s becomes 2437.5.
    sc = h_then_j_then_c()

    def run_with(samples):
        return run_scenario(sc, eta=EtaOptions(
            step_s=0, step_rel=0, calibrate=True, calibration_samples=samples, min_samples=2,
            default_run_s=100))["workloads"]

    out = run_with(4)
    assert out["h1"]["eta_at_submit"]["start"] == 100 and out["h1"]["admissions"][0]["at"] == 100
    assert out["j1"]["eta_at_submit"]["start"] == 1100
    assert out["j1"]["admissions"][0]["at"] == 2000
    # at 1000 the due forecasts (h1..h4) came true: no correction
    assert out["j4"]["eta_at_submit"]["factor"] == 1.0
    assert out["j4"]["eta_at_submit"]["start"] == 1400
    assert out["c"]["eta_at_submit"] == {
        "at": 1450, "start": 3887.5, "low": 2000, "high": 10400,
        "raw": [2750, 2000, 10400], "factor": 1.875}
    assert out["c"]["admissions"][0]["at"] == 6000
    # the latest thirty: h1..h4 (1, 1, 1, 1) too: the median 1.0625 is within the band
    wide = run_with(30)
    assert wide["c"]["eta_at_submit"]["factor"] == 1.0
    assert wide["c"]["eta_at_submit"]["start"] == 2750


def test_study_recordings_drain_and_first_forecasts():
    # The calibration case above, recorded for studying. At 1450 j1..j4 (8 GPUs each) are
    # ahead of c in queue a, each at the mean of a's latest runs (h0..h4: 100 s): 3,200
    # GPU-seconds; j0 holds the 8 GPUs; the last hour saw h0..h4 run 0-500 and j0 1000-1450
    # on 8 GPUs: 7,600 GPU-seconds, 2.11 GPUs on average.
    sc = h_then_j_then_c()
    out = run_scenario(sc, eta=EtaOptions(
        step_s=0, step_rel=0, min_samples=2, default_run_s=100, all_pending=True,
        record_starts=True, record_drain=True, extra=((0.5, "quantile"),)))
    eta = out["workloads"]["c"]["eta_at_submit"]
    assert (eta["ahead_gpu_s"], eta["gpus"], eta["in_use"]) == (3200, 8, 8)
    assert round(eta["used_1h"], 3) == round(7600 / 3600, 3)
    # j0 at its conditional median: 450 s older than every past run, as long again
    assert eta["starts"] == [3200, 2000, 2300, 10400, 2300]
    first = {f["name"]: f for f in out["first_forecasts"]}
    assert (first["c"]["queue"], first["c"]["at"]) == ("a", 1450)
    assert first["c"]["starts"] == pytest.approx(eta["starts"])
    # every workload was pending at a forecast (its own, before the cycle that took it)
    assert first["j1"]["at"] == 1000
    assert set(first) == {f"h{i}" for i in range(5)} | {f"j{i}" for i in range(5)} | {"c"}


def test_the_recent_submissions_come_again_in_the_forecast():
    # a1 (a, within its min) and bx (b, within its min) take the two nodes at 0; c (a, would
    # borrow) waits from 500 for bx's node, freed at 1000. With no new work c is forecast at
    # 1000, when it starts. With the last 600 s of submissions coming again 600 s later, bx's
    # copy arrives at 600 and, within b's guarantee once bx ends, goes ahead of the borrower c
    # at 1000 for bx's 1000 s: c is forecast at 2000 (a1's copy, at 600, is behind c).
    jobs = [job("a1", "a", 0, duration_s=3000), job("bx", "b", 0, duration_s=1000),
            job("c", "a", 500, duration_s=10)]
    none = run(jobs, hints=True, arrivals_s=0)
    assert none["c"]["eta_at_submit"] == {"at": 500, "start": 1000, "low": 1000, "high": 1000}
    assert none["c"]["admissions"][0]["at"] == 1000
    again = run(jobs, hints=True, arrivals_s=600, arrivals_repeat=1, free_levels=())
    assert again["c"]["eta_at_submit"] == {"at": 500, "start": 2000, "low": 2000, "high": 2000}
    # what really happens does not change: the copies are the forecast's only
    assert again["c"]["admissions"][0]["at"] == 1000 and "~bx" not in again
    # again twice: bx's second copy, at 1200, goes ahead of c at 2000 too;
    # c is forecast at 3000
    twice = run(jobs, hints=True, arrivals_s=600, arrivals_repeat=2)
    assert twice["c"]["eta_at_submit"]["start"] == 3000
    # the live default: the last day, for three days
    assert (EtaOptions().arrivals_s, EtaOptions().arrivals_repeat) == (86400.0, 3)
    # live, the p25 fast-forward takes no new work: the range's low end is c's start if
    # nothing new goes ahead (1000, as it happened), the start the median of 2000 three times
    # and 1000 (the resolution is 0 here, so the range is not widened)
    assert EtaOptions().free_levels == (0.25,) and EtaOptions().pad
    free = run(jobs, hints=True, arrivals_s=600, arrivals_repeat=1)
    assert free["c"]["eta_at_submit"] == {"at": 500, "start": 2000, "low": 1000, "high": 2000}
