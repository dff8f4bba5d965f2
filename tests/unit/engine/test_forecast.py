"""The start forecast: the snapshot fast-forwarded through the engine (hand-computed cases)."""

from __future__ import annotations

import math

from scheduling.engine import AdmittedWorkload, FlavorSpec, Settings, Snapshot
from scheduling.engine.forecast import (
    Known,
    RunTimes,
    draw,
    estimate,
    fast_forward,
    quantile,
    sampled_lengths,
)
from tests.unit.engine.builders import A100, cluster, q, wl

NOW = 1000.0


def snap(pending, admitted=(), nodes=1, cooldowns=None, queues=None, **settings):
    return Snapshot(
        now=NOW, queues=tuple(queues or [q("a", 8, 8)]), clusters=(cluster(nodes=nodes),),
        flavors=(FlavorSpec(A100, 80),), pending=tuple(pending), admitted=tuple(admitted),
        settings=Settings(**settings), cooldowns=cooldowns or {})


def running(name, queue="a", gpus=8, node="c-a100-80g-0", at=0.0):
    return AdmittedWorkload(wl(name, queue, gpus, t=at), "c", A100, (node,), False, at,
                            running=True)


def three_behind_r():
    """a1, b1 and c pending in queue a behind r (8 GPUs, ends at +100 by its hint) on one
    node; the queue's runs 100 s four times and 600 s once."""
    runtimes = RunTimes(by_queue={"a": (100.0, 100.0, 100.0, 100.0, 600.0)})
    return runtimes, snap([wl("a1", "a", 8, t=1), wl("b1", "a", 8, t=2), wl("c", "a", 8, t=3)],
                          [running("r")])


def test_known_durations_give_exact_starts():
    # 8 GPUs, r runs until 1100. b (8, 50 s) starts at 1100 and ends at 1150; c and d (4 each)
    # then start together at 1150.
    s = snap([wl("b", "a", 8, t=10), wl("c", "a", 4, t=20), wl("d", "a", 4, t=30)],
             [running("r")])
    starts = fast_forward(s, remaining={"r": 100}, durations={"b": 50, "c": 10, "d": 10},
                          horizon_s=86400)
    assert starts == {"b": 1100, "c": 1150, "d": 1150}


def test_free_capacity_starts_now_and_horizon_leaves_unknown():
    s = snap([wl("b", "a", 4, t=10), wl("c", "a", 8, t=20)], [running("r", gpus=4)])
    starts = fast_forward(s, remaining={"r": 5000}, durations={"b": 100}, horizon_s=3600)
    # b fits beside r now; c needs r's and b's GPUs: r ends at 6000, past the horizon.
    assert starts == {"b": NOW}


def test_cooldown_is_respected():
    # Leaf b had work reclaimed: it may not start borrowing admissions until 1300. The node is
    # free (a's min of 8 is idle and lendable), so b's borrower y fits at once in quota and
    # nodes, but the engine admits it only when the cooldown ends: never "now".
    queues = [q("a", 8, 8), q("b", 0, 8)]
    s = snap([wl("y", "b", 8, t=900)], queues=queues, cooldowns={"b": 1300.0})
    starts = fast_forward(s, remaining={}, durations={"y": 100}, horizon_s=86400)
    assert starts == {"y": 1300}


def test_estimate_range_over_run_time_quantiles():
    # r has no hint and has run 100 s; the queue's past runs are 200..1000 s. b waits for r.
    runtimes = RunTimes(by_queue={"a": (200.0, 400.0, 600.0, 800.0, 1000.0)})
    s = snap([wl("b", "a", 8, t=10)], [running("r")])
    est = estimate(s, known={"r": Known(elapsed_s=100)}, runtimes=runtimes, horizon_s=86400)
    # Runs longer than 100 s: all five. r's remaining time: at p25 400 - 100 = 300; at the
    # start's level (p75) 800 - 100 = 700; at p95 960 - 100 = 860.
    e = est["b"]
    assert (e.low, e.start, e.high) == (NOW + 300, NOW + 700, NOW + 860)


def test_start_takes_work_not_started_at_its_mean():
    # Two 4-GPU runs ahead of c on 8 GPUs held by r (hint: ends at +100); past runs 100, 100,
    # 100, 100, 600 s: mean 200. a then b (8 each) run one after another: c at 100 + 2 x 200.
    runtimes, s = three_behind_r()
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400)
    assert est["c"].start == NOW + 500
    # The range: at p25 (100 s each) 300; at p95 (500 s each) 1100.
    assert (est["c"].low, est["c"].high) == (NOW + 300, NOW + 1100)


def test_start_takes_the_queues_latest_runs_when_there_are_enough():
    # The month: 100 x 4 and 600 (mean 200); the latest five: 50, 50, 60, 70, 400 (mean 126).
    # a1 and b1 (8 GPUs each) run one after another behind r (ends at +100): c at
    # 100 + 2 x 126.
    runtimes = RunTimes(by_queue={"a": (100.0, 100.0, 100.0, 100.0, 600.0)},
                        recent={"a": (50.0, 50.0, 60.0, 70.0, 400.0)})
    s = snap([wl("a1", "a", 8, t=1), wl("b1", "a", 8, t=2), wl("c", "a", 8, t=3)],
             [running("r")])
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400)
    assert est["c"].start == NOW + 352
    # The range is still over the month's quantiles: p25 (100 s each) 300, p95 (500 s) 1100.
    assert (est["c"].low, est["c"].high) == (NOW + 300, NOW + 1100)
    # Fewer than min_samples latest runs: the month's mean, as before; the median if asked.
    few = RunTimes(by_queue=runtimes.by_queue, recent={"a": (50.0,)})
    assert few.point("a") == 200.0 and runtimes.point("a") == 126.0
    assert RunTimes(recent=runtimes.recent, recent_stat="median").point("a") == 60.0


def test_running_work_for_the_start_is_conditioned_on_the_history_unless_asked():
    rt = RunTimes(by_queue={"a": (10.0, 20.0, 30.0, 40.0, 50.0)},
                  recent={"a": (100.0, 200.0, 300.0, 400.0, 500.0)})
    # By default the month's rule (older than every run: 250 x 0.75 / 0.25 at p75).
    assert rt.point_remaining("a", 250, 0.75) == 750
    # recent_running: the latest runs longer than it (300, 400, 500: mean 400).
    latest = RunTimes(by_queue=rt.by_queue, recent=rt.recent, recent_running=True)
    assert latest.point_remaining("a", 250, 0.75) == 400 - 250
    assert latest.point_remaining("a", 600, 0.5) == 600  # older than them all: the rule


def test_estimate_with_hints_is_a_point():
    s = snap([wl("b", "a", 8, t=10)], [running("r")])
    est = estimate(s, known={"r": Known(hint_s=500, progress_s=100, elapsed_s=150),
                             "b": Known(hint_s=60)}, runtimes=RunTimes(), horizon_s=86400)
    assert (est["b"].low, est["b"].start, est["b"].high) == (NOW + 250,) * 3


def test_remaining_conditioned_on_age():
    rt = RunTimes(by_queue={"a": (10.0, 20.0, 30.0, 40.0, 50.0)})
    assert rt.remaining("a", 25, 0.5) == 40 - 25  # median of 30, 40, 50
    assert rt.remaining("a", 60, 0.5) == 60  # older than every run: as long again
    # with tail_from_fleet: the fleet's runs longer than it first (median of 100, 200, 300)
    fleet = RunTimes(by_queue=rt.by_queue, fleet=(10.0, 50.0, 100.0, 200.0, 300.0),
                     tail_from_fleet=True)
    assert fleet.remaining("a", 60, 0.5) == 200 - 60
    assert fleet.remaining("a", 25, 0.5) == 40 - 25  # the queue's own when it has them
    assert fleet.remaining("a", 400, 0.5) == 400  # older than the fleet's too
    assert RunTimes(default_s=100).total("x", 0.5) == 100
    assert quantile((1.0, 3.0), 0.5) == 2.0
    assert math.isnan(quantile((), 0.5))


def test_fleet_history_when_the_queue_has_too_few_runs():
    rt = RunTimes(by_queue={"a": (1.0,)}, fleet=(100.0,) * 5)
    assert rt.samples("a")[1] == "fleet"
    assert rt.total("a", 0.5) == 100


def test_victims_requeue_and_start_again():
    # a reclaims from b: x (b's borrower) goes back to the queue and starts once p ends.
    queues = [q("a", 8, 8), q("b", 0, 8)]
    borrower = AdmittedWorkload(wl("x", "b", 8, t=0), "c", A100, ("c-a100-80g-0",), True, 0.0)
    s = snap([wl("p", "a", 8, t=900)], [borrower], queues=queues, termination_grace_s=30)
    starts = fast_forward(s, remaining={"x": 4000}, durations={"p": 100, "x": 4000},
                          horizon_s=86400, targets={"p"})
    assert starts == {"p": NOW + 30}


def test_start_as_the_median_of_the_simulated_starts():
    # As above: the mean-run fast-forward starts c at +500; at p25 and p50 (100 s each) +300,
    # at p95 +1100. The median of the four: (300 + 500) / 2; the range as before.
    runtimes, s = three_behind_r()
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   levels=(0.25, 0.5, 0.95), start_stat="median")["c"]
    assert (est.low, est.start, est.high) == (NOW + 300, NOW + 400, NOW + 1100)
    # A start beyond the horizon counts as the latest: past it when half of them are.
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=450,
                   levels=(0.25, 0.5, 0.95), start_stat="median")["c"]
    assert (est.low, est.start, est.high) == (NOW + 300, None, None)


def test_a_long_wait_moves_halfway_to_the_start_with_queued_work_at_its_mean():
    # As above: the median start of c is +400 (p25 and p50 run a1 and b1 for 100 s each).
    # With long_wait_s 400 it is that long: the p50 fast-forward runs again with a1 and b1 at
    # their mean (200 s each; r's remaining time is its hint), c at +500 in it, so the
    # median with it would be that of +500, +300, +500, +1100: +500; the start moves halfway
    # there, to +450. The range stays over the first four; the chained start is kept after
    # them.
    runtimes, s = three_behind_r()
    live = {"levels": (0.25, 0.5, 0.95), "start_stat": "median"}
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   long_wait_s=400, **live)
    assert (est["c"].low, est["c"].start, est["c"].high) == (NOW + 300, NOW + 450, NOW + 1100)
    assert est["c"].starts == (NOW + 500, NOW + 300, NOW + 300, NOW + 1100, NOW + 500)
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   long_wait_s=400, long_weight=1.0, **live)
    assert est["c"].start == NOW + 500
    # b1 (after r and a1: +300, +200, +200, +600, the median +250) is not that long: as it
    # was.
    assert (est["b1"].start, len(est["b1"].starts)) == (NOW + 250, 4)
    # A threshold past c's start: nothing runs again.
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   long_wait_s=401, **live)
    assert (est["c"].start, len(est["c"].starts)) == (NOW + 400, 4)
    # Running work stays at the level: r (no hint) has run 50 s, the runs longer are all
    # five, p25 and p50 100 s, so 50 s left; c then at 50 + 2 x 200 at both levels chained.
    est = estimate(s, known={"r": Known(elapsed_s=50)}, runtimes=runtimes, horizon_s=86400,
                   long_wait_s=0, chain_levels=(0.25, 0.5), **live)
    assert est["c"].starts[4:] == (NOW + 450, NOW + 450)


def test_start_as_the_average_of_the_simulated_starts_and_each_start_kept():
    # As above: the four starts are +500 (mean runs), +300 (p25), +300 (p50), +1100 (p95):
    # their average +550; with one beyond the horizon, their median (as start_stat="median").
    runtimes, s = three_behind_r()
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   levels=(0.25, 0.5, 0.95), start_stat="average")["c"]
    assert (est.low, est.start, est.high) == (NOW + 300, NOW + 550, NOW + 1100)
    assert est.starts == (NOW + 500, NOW + 300, NOW + 300, NOW + 1100)
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=1000,
                   levels=(0.25, 0.5, 0.95), start_stat="average")["c"]
    assert est.starts == (NOW + 500, NOW + 300, NOW + 300, None)
    assert (est.start, est.high) == (NOW + 400, None)


def test_latest_runs_by_size_first_then_the_queues():
    rt = RunTimes(recent={"a": (100.0,) * 5}, recent_by_size={("a", 8): (700.0,) * 5,
                                                               ("a", 1): (10.0,) * 2})
    assert rt.point("a", 8) == 700.0
    assert rt.point("a", 1) == 100.0  # fewer than min_samples of its size: the queue's
    assert rt.point("a") == 100.0
    # In the forecast: c (8 GPUs) waits behind a1 and b1 (8 GPUs, 700 s each) and r (+100).
    s = snap([wl("a1", "a", 8, t=1), wl("b1", "a", 8, t=2), wl("c", "a", 8, t=3)],
             [running("r")])
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=rt, horizon_s=86400,
                   levels=())["c"]
    assert est.start == NOW + 100 + 2 * 700


def test_running_work_for_the_start_at_its_conditional_mean_when_asked():
    rt = RunTimes(by_queue={"a": (10.0, 20.0, 30.0, 40.0, 50.0)}, remaining_stat="mean")
    # Runs longer than 25 s: 30, 40, 50 (mean 40): 15 s left; older than all: the rule.
    assert rt.point_remaining("a", 25, 0.75) == 40 - 25
    assert rt.point_remaining("a", 60, 0.5) == 60
    # By default at the quantile: p75 of 30, 40, 50 is 45.
    assert RunTimes(by_queue=rt.by_queue).point_remaining("a", 25, 0.75) == 45 - 25


def test_drawn_quantiles_are_reproducible_and_spread():
    us = [draw(f"w{i}", 1) for i in range(10_000)]
    assert us == [draw(f"w{i}", 1) for i in range(10_000)]  # the same name and seed
    assert us != [draw(f"w{i}", 2) for i in range(10_000)]  # another sample
    assert min(us) >= 0.02 and max(us) <= 0.98
    xs = sorted(us)  # about uniform on [0.02, 0.98]: its quartiles 0.26, 0.5, 0.74
    assert [round(quantile(xs, x), 1) for x in (0.25, 0.5, 0.75)] == [0.3, 0.5, 0.7]


def test_sampled_run_lengths_draw_each_workloads_quantile():
    # r runs (age 25 s; the queue's runs 10..50 s), b pending (the latest runs 100..500 s),
    # h has a hint: each unhinted one at its own drawn quantile.
    rt = RunTimes(by_queue={"a": (10.0, 20.0, 30.0, 40.0, 50.0)},
                  recent={"a": (100.0, 200.0, 300.0, 400.0, 500.0)})
    s = snap([wl("b", "a", 8, t=10), wl("h", "a", 8, t=20)], [running("r")])
    known = {"r": Known(elapsed_s=25.0), "h": Known(hint_s=70.0)}
    remaining, durations = sampled_lengths(s, known, rt, seed=3)
    assert remaining["r"] == rt.remaining("a", 25.0, draw("r", 3))
    assert durations["b"] == quantile(rt.recent["a"], draw("b", 3))
    assert durations["h"] == 70.0


def test_extra_fast_forwards_are_recorded_after_the_levels_only():
    # As in the median test: the extra runs (running work at its conditional median, one
    # sampled run) change neither the start nor the range, and come last in `starts`.
    runtimes, s = three_behind_r()
    plain = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                     levels=(0.25, 0.5, 0.95), start_stat="median")["c"]
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   levels=(0.25, 0.5, 0.95), start_stat="median",
                   extra=((0.5, "quantile"), (1, "sample")))["c"]
    assert (est.low, est.start, est.high) == (plain.low, plain.start, plain.high)
    assert est.starts[:4] == plain.starts and len(est.starts) == 6
    # r ends at +100 (hint); a1 and b1 then run their drawn lengths (100 or 600 s) in turn
    assert est.starts[5] in {NOW + 100 + x + y for x in (100, 600) for y in (100, 600)}


def test_start_from_some_levels_only_widens_the_range_to_hold_it():
    # As in the median test: the mean-run start +500, p25 and p50 +300, p95 +1100. The start
    # from the mean-run, p50 and p95 ones: +500; the range as before.
    runtimes, s = three_behind_r()
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   levels=(0.25, 0.5, 0.95), start_stat="median",
                   start_levels=(0.5, 0.95))["c"]
    assert (est.low, est.start, est.high) == (NOW + 300, NOW + 500, NOW + 1100)
    # from the p25 and p50 ones with the mean-run one: +300
    est = estimate(s, known={"r": Known(hint_s=100)}, runtimes=runtimes, horizon_s=86400,
                   levels=(0.25, 0.5, 0.95), start_stat="median",
                   start_levels=(0.25, 0.5))["c"]
    assert (est.low, est.start, est.high) == (NOW + 300, NOW + 300, NOW + 1100)


def test_the_resolution_takes_nearby_ends_in_one_cycle_late_or_halfway():
    # Two nodes: r1 ends at 1100, r2 at 1200; b and c (8 GPUs, 50 s) wait. Exact: b at 1100,
    # c at 1150 (b's node again). With a 200 s resolution both ends go to one cycle: at the
    # last of them (every start late: 1200, 1200) or halfway (1150, 1150: early and late
    # cancel along a chain of runs instead of adding up).
    s = snap([wl("b", "a", 8, t=10), wl("c", "a", 8, t=20)],
             [running("r1"), running("r2", node="c-a100-80g-1")], nodes=2,
             queues=[q("a", 16, 16)])
    kw = {"remaining": {"r1": 100, "r2": 200}, "durations": {"b": 50, "c": 50},
          "horizon_s": 86400}
    assert fast_forward(s, **kw) == {"b": 1100, "c": 1150}
    assert fast_forward(s, step_s=200, step_at="last", **kw) == {"b": 1200, "c": 1200}
    assert fast_forward(s, step_s=200, **kw) == {"b": 1150, "c": 1150}  # the default


def test_pad_widens_the_range_by_half_the_resolution():
    # r ends at +10,000 by its hint, b (8 GPUs, with a hint) starts then at every level: the
    # range is a point. The resolution there is max(60 s, 2% x 10,000 s) = 200 s: padded,
    # the range is 100 s either side; a start 1,000 s ahead gets the 60 s floor, halved.
    s = snap([wl("b", "a", 8, t=10)], [running("r")])
    known = {"r": Known(hint_s=10_000.0), "b": Known(hint_s=50.0)}
    args = {"known": known, "runtimes": RunTimes(), "horizon_s": 86400.0, "step_s": 60.0,
            "step_rel": 0.02, "levels": (0.25, 0.5, 0.95), "start_stat": "median"}
    plain = estimate(s, **args)["b"]
    assert (plain.start, plain.low, plain.high) == (11_000.0, 11_000.0, 11_000.0)
    padded = estimate(s, pad=True, **args)["b"]
    assert (padded.start, padded.low, padded.high) == (11_000.0, 10_900.0, 11_100.0)
    near = {"r": Known(hint_s=1_000.0), "b": Known(hint_s=50.0)}
    e = estimate(s, pad=True, **{**args, "known": near})["b"]
    assert (e.start, e.low, e.high) == (2_000.0, 1_970.0, 2_030.0)
