"""Start forecasts on the database (scheduling/workers/eta.py): stored per pending workload,
read by the API, the workload page, the dashboard and the request form."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import Workload, WorkloadEstimate
from scheduling.workers.eta import (
    ALL_PENDING,
    estimates_refresh,
    estimates_store,
    runtimes_read,
)
from scheduling.workers.snapshot import build_snapshot
from tests.integration.scheduling.world import make_world, running_workload, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def exact(settings):
    """One simulated cycle per distinct end: starts exact to the second; no refresh skipped
    from an earlier test's mark."""
    from django.core.cache import cache

    from scheduling.workers.eta import FINGERPRINT_KEY, REFRESHED_KEY

    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "step_s": 0.0, "step_rel": 0.0}
    cache.delete(FINGERPRINT_KEY)
    cache.delete(REFRESHED_KEY)


@pytest.fixture
def full():
    """Two 8-GPU nodes, each running an 8-GPU workload with a one-hour hint; two more wait."""
    world = make_world(nodes_per_cluster=1)
    r1, _ = running_workload(world, "r1", 3600)
    r2, _ = running_workload(world, "r2", 3600)
    p1 = submit(world, "p1", duration_hint_s=600)
    p2 = submit(world, "p2", duration_hint_s=600)
    return world, r1, r2, p1, p2


def ends(*running: Workload) -> list:
    return sorted(w.admissions.get().running_at + timedelta(seconds=3600) for w in running)


def close(a, b) -> bool:
    return abs((a - b).total_seconds()) < 1.0


def test_refresh_stores_exact_starts_with_hints(full):
    world, r1, r2, p1, p2 = full
    now = timezone.now()
    report = estimates_refresh(now=now)
    assert report.pending == 2 and report.estimated == 2
    first, second = ends(r1, r2)
    e1 = WorkloadEstimate.objects.get(workload=p1)
    e2 = WorkloadEstimate.objects.get(workload=p2)
    # Hints everywhere: the range is a point; p1 takes the first node freed, p2 the second.
    assert close(e1.start, first) and close(e1.low, first) and close(e1.high, first)
    assert close(e2.start, second)
    assert "duration hints" in e1.assumes and e1.computed_at == now


def test_api_and_pages_show_the_forecast(full, client):
    world, r1, r2, p1, p2 = full
    estimates_refresh()
    api = APIClient()
    api.force_authenticate(world.alice)
    pos = api.get(f"/api/v1/workloads/{p2.pk}").json()["queue_position"]
    second = ends(r1, r2)[1]
    assert pos["in_queue"] == 2
    assert pos["estimated_start"] == second.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert pos["estimated_start_range"]["low"] == pos["estimated_start"]
    assert pos["estimated_start_range"]["high"] == pos["estimated_start"]
    assert ("Assumes new work comes in each of the next 3 periods as in the last day"
            in pos["estimate_assumes"])
    client.force_login(world.alice)
    page = client.get(f"/workloads/{p2.pk}/").content.decode()
    assert second.strftime("%Y-%m-%d %H:%M") in page and 'id="estimate-assumes"' in page
    dash = client.get("/").content.decode()
    assert 'class="eta"' in dash and second.strftime("%Y-%m-%d %H:%M") in dash


def test_no_forecast_yet_says_so(full, client):
    world, _r1, _r2, p1, _p2 = full
    client.force_login(world.alice)
    page = client.get(f"/workloads/{p1.pk}/").content.decode()
    assert "not forecast yet" in page


def test_a_workload_that_moved_keeps_no_estimate(full):
    world, _r1, _r2, p1, p2 = full
    from scheduling.services import workload_cancel

    workload_cancel(user=world.alice, workload=p1)
    estimates_refresh()
    assert list(WorkloadEstimate.objects.values_list("workload_id", flat=True)) == [p2.pk]


def test_run_time_history_per_queue():
    world = make_world(nodes_per_cluster=1)
    w, _ = running_workload(world, "done", 100)
    adm = w.admissions.get()
    adm.ended_at, adm.end_reason = adm.running_at + timedelta(seconds=1234), "finished"
    adm.save()
    rt = runtimes_read(timezone.now())
    assert rt.by_queue == {"rd/vision": (1234.0,)}


def test_request_form_shows_the_forecast_with_the_request_added(full, client):
    from tests.integration.portal.conftest import pod_rows

    world, r1, r2, _p1, _p2 = full
    client.force_login(world.alice)
    form = {"queue": "rd/vision", "name": "next", "flavor_1": "a100-80g",
            **pod_rows({"count": 1, "gpus": 8, "cpu": 8, "memory_gib": 64}),
            "priority_class": "training", "preemptible": "on", "checkpoint": "on",
            "command": "python train.py", "duration_h": "1"}
    html = client.post("/workloads/new/check/", form).content.decode()
    # p1 and p2 (600 s each) take the two nodes as r1 and r2 end; the request follows p1.
    first = ends(r1, r2)[0] + timedelta(seconds=600)
    assert 'id="request-eta"' in html and first.strftime("%Y-%m-%d %H:%M") in html
    assert "duration hints where given" in html


def test_request_form_leaves_a_long_fleet_queue_to_the_background(full, client, settings):
    from tests.integration.portal.conftest import pod_rows

    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "preview_max_pending": 1}
    world = full[0]
    client.force_login(world.alice)
    form = {"queue": "rd/vision", "name": "next", "flavor_1": "a100-80g",
            **pod_rows({"count": 1, "gpus": 8, "cpu": 8, "memory_gib": 64}),
            "priority_class": "training", "preemptible": "on", "checkpoint": "on",
            "command": "python train.py"}
    html = client.post("/workloads/new/check/", form).content.decode()
    assert "2 workloads wait in the fleet: the start is forecast in the background" in html


def test_refresh_skips_when_nothing_changed(full):
    world, _r1, _r2, p1, _p2 = full
    assert not estimates_refresh().skipped
    assert estimates_refresh().skipped  # no event since
    from scheduling.services import workload_cancel

    workload_cancel(user=world.alice, workload=p1)
    report = estimates_refresh()
    assert not report.skipped and report.pending == 1
    assert estimates_refresh(force=True).pending == 1


def test_refresh_writes_only_what_moved_in_a_few_statements(full):
    world, _r1, _r2, p1, p2 = full
    from scheduling.services import workload_cancel

    now = timezone.now()
    first = estimates_refresh(now=now).store
    assert (first.inserted, first.updated, first.deleted, first.unchanged) == (2, 0, 0, 0)
    assert first.statements <= 6  # not one per row
    ids_before = dict(WorkloadEstimate.objects.values_list("workload_id", "pk"))
    # Nothing moved: nothing written; the rows keep their time, the API says the latest.
    later = now + timedelta(seconds=5)
    again = estimates_refresh(now=later, force=True).store
    assert (again.inserted, again.updated, again.deleted, again.unchanged) == (0, 0, 0, 2)
    assert set(WorkloadEstimate.objects.values_list("computed_at", flat=True)) == {now}
    api = APIClient()
    api.force_authenticate(world.alice)
    pos = api.get(f"/api/v1/workloads/{p2.pk}").json()["queue_position"]
    assert pos["estimate_computed_at"] == later.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # p1 leaves: its row goes; p2 starts 10 min later (an UPDATE of the same row); p3 is new.
    workload_cancel(user=world.alice, workload=p1)
    p3 = submit(world, "p3")
    e2 = WorkloadEstimate.objects.get(workload=p2)
    shifted = e2.start + timedelta(minutes=10)
    rows = [WorkloadEstimate(workload_id=p2.pk, start=shifted, low=e2.low, high=e2.high,
                             assumes=e2.assumes, computed_at=later),
            WorkloadEstimate(workload_id=p3.pk, start=None, low=None, high=None,
                             assumes="x", computed_at=later)]
    moved = estimates_store(rows, now=later, step_s=60.0, step_rel=0.02)
    assert (moved.inserted, moved.updated, moved.deleted, moved.unchanged) == (1, 1, 1, 0)
    assert moved.statements <= 6
    e2 = WorkloadEstimate.objects.get(workload=p2)
    assert e2.pk == ids_before[p2.pk] and e2.computed_at == later and e2.start == shifted
    assert set(WorkloadEstimate.objects.values_list("workload_id", flat=True)) == {p2.pk, p3.pk}


def test_a_move_within_the_resolution_is_not_written(full):
    from scheduling.workers.eta import _moved

    now = timezone.now()
    at = now + timedelta(hours=10)
    # 2% of 10 h ahead is 12 min: 5 min is within, 20 min is not; 60 s floor near now.
    assert not _moved(at, at + timedelta(minutes=5), now, 60.0, 0.02)
    assert _moved(at, at + timedelta(minutes=20), now, 60.0, 0.02)
    assert _moved(now, now + timedelta(seconds=90), now, 60.0, 0.02)
    assert _moved(None, at, now, 60.0, 0.02) and not _moved(None, None, now, 60.0, 0.02)


def test_refresh_keeps_first_forecasts_and_scales_by_how_earlier_ones_came_out(full, settings):
    """The refresh applies the calibration (scheduling/engine/calibration.py): r1 and r2 were
    forecast to start 250 s after they were, in the last refresh, and waited 1,000 s: the
    queue's forecasts came out 4 times as late, so p1's and p2's waits are scaled by 4."""
    from scheduling.models import FirstEstimate

    world, r1, r2, p1, p2 = full
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "min_samples": 2, "calibrate": True}
    for r in (r1, r2):
        admitted = r.admissions.get().reserved_at
        FirstEstimate.objects.create(workload=r, made_at=admitted - timedelta(seconds=1000),
                                     start=admitted - timedelta(seconds=750))
    now = timezone.now()
    estimates_refresh(now=now)
    first, second = ends(r1, r2)
    e1 = WorkloadEstimate.objects.get(workload=p1)
    e2 = WorkloadEstimate.objects.get(workload=p2)
    assert close(e1.start, now + 4 * (first - now)) and close(e2.start, now + 4 * (second - now))
    # the range, a point with hints, widened to hold the scaled start
    assert close(e1.low, first) and close(e1.high, e1.start)
    assert "Wait scaled x4.00" in e1.assumes
    # p1 and p2's first forecasts are kept as simulated, before the scaling
    kept = {f.workload_id: f for f in FirstEstimate.objects.filter(workload__in=[p1, p2])}
    assert close(kept[p1.pk].start, first) and close(kept[p2.pk].start, second)
    assert kept[p1.pk].made_at == now
    # a later refresh keeps the first forecast, not its own; the wait left is scaled
    later = now + timedelta(seconds=30)
    estimates_refresh(now=later, force=True)
    assert FirstEstimate.objects.get(workload=p1).made_at == now
    e1 = WorkloadEstimate.objects.get(workload=p1)
    assert close(e1.start, later + 4 * (first - later))
    api = APIClient()
    api.force_authenticate(world.alice)
    pos = api.get(f"/api/v1/workloads/{p1.pk}").json()["queue_position"]
    assert pos["estimated_start"] == e1.start.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert pos["estimated_start_range"]["high"] == pos["estimated_start"]
    # off: the forecast as simulated
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "calibrate": False}
    estimates_refresh(now=now + timedelta(seconds=60), force=True)
    assert close(WorkloadEstimate.objects.get(workload=p1).start, first)


def test_calibration_reads_due_first_forecasts_with_their_actual_starts(full):
    from scheduling.models import FirstEstimate
    from scheduling.workers.eta_calibration import outcomes_read

    world, r1, r2, p1, p2 = full
    admitted = r1.admissions.get().reserved_at
    now = max(admitted, r2.admissions.get().reserved_at) + timedelta(seconds=600)
    FirstEstimate.objects.create(workload=r1, made_at=admitted - timedelta(seconds=100),
                                 start=admitted - timedelta(seconds=50))
    # p1 still waits; its forecast start has passed: a sample with no actual start yet
    FirstEstimate.objects.create(workload=p1, made_at=now - timedelta(seconds=600),
                                 start=now - timedelta(seconds=300))
    # not due yet: no sample
    FirstEstimate.objects.create(workload=p2, made_at=now, start=now + timedelta(hours=1))
    # r2 was first forecast after its admission (as if requeued after it ran): not admitted
    # since that forecast
    FirstEstimate.objects.create(workload=r2, made_at=now - timedelta(seconds=60),
                                 start=now - timedelta(seconds=30))
    got = outcomes_read(now)
    assert list(got) == ["rd/vision"]
    starts = [o.start for o in got["rd/vision"]]
    assert starts == sorted(starts, reverse=True) and len(starts) == 3  # newest first
    (started,) = [o for o in got["rd/vision"] if o.actual is not None]
    waiting, requeued = sorted((o for o in got["rd/vision"] if o.actual is None),
                               key=lambda o: o.at)
    assert requeued.at == (now - timedelta(seconds=60)).timestamp()
    assert started.actual == admitted.timestamp()
    t = now.timestamp()
    assert started.ratio(t) == pytest.approx(2.0)  # waited 100 s, forecast 50 s
    assert waiting.ratio(t) == pytest.approx(2.0)  # 600 s so far, forecast 300 s
    assert requeued.ratio(t) == pytest.approx(2.0)  # 60 s so far, forecast 30 s


def test_the_start_rule_setting_reaches_the_refresh_and_the_request_form(full, settings,
                                                                          monkeypatch):
    # ALLOT_ETA_START_POINT / ALLOT_ETA_START_LEVELS (off by default: all levels, p75) go
    # to the same forecast for the stored estimates and for a request being written.
    from scheduling.engine import forecast as engine_forecast
    from scheduling.workers import eta

    seen = []

    def spy(*args, **kwargs):
        seen.append((kwargs["point"], kwargs["start_levels"]))
        return engine_forecast.estimate(*args, **kwargs)

    monkeypatch.setattr(eta, "estimate", spy)
    world, _r1, _r2, p1, _p2 = full
    estimates_refresh(force=True)
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "start_point": 0.5,
                          "start_levels": (0.5, 0.95)}
    estimates_refresh(force=True)
    spec = eta.build_snapshot(timezone.now(), pending_limit=eta.ALL_PENDING,
                              record=False)[0].pending[0]
    got = eta.request_estimate(spec=replace(spec, name="request"), hint_s=600,
                               now=timezone.now())
    assert seen == [(0.75, None), (0.5, (0.5, 0.95)), (0.5, (0.5, 0.95))]
    # with hints everywhere every rule gives the same, exact start
    assert got.start == got.low == got.high
    assert WorkloadEstimate.objects.filter(workload=p1).exists()


def test_the_last_hours_submissions_come_again_ahead_of_pending_work(full, settings):
    """ALLOT_ETA_ARRIVALS_S: the coming demand is taken to be the recent past's. A workload of
    a higher class submitted 30 min ago (then cancelled) comes again 30 min from now,
    while p1 and p2 wait for r1 and r2: it takes the first node freed, p1 the second, and p2
    waits for p1 (600 s) instead of taking the second node. (No workload starves here: a
    starving one would go first whatever its class.)"""
    from scheduling.models import PriorityClass, WorkloadState
    from scheduling.workers.eta import request_estimate

    world, r1, r2, p1, p2 = full
    PriorityClass.objects.create(name="urgent", value=5000, can_preempt=False)
    now = timezone.now()
    urgent = submit(world, "urgent", priority_class="urgent", duration_hint_s=1200)
    Workload.objects.filter(pk=urgent.pk).update(
        submitted_at=now - timedelta(minutes=30), state=WorkloadState.CANCELLED)
    # a rejected submission is not demand to come
    gone = submit(world, "gone", priority_class="urgent", duration_hint_s=1200)
    Workload.objects.filter(pk=gone.pk).update(
        submitted_at=now - timedelta(minutes=20), state=WorkloadState.REJECTED)
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "arrivals_s": 3600.0, "arrivals_repeat": 1}
    settings.ALLOT_ENGINE = {**settings.ALLOT_ENGINE, "starvation_s": 86400.0}
    first, second = ends(r1, r2)
    assert second - first < timedelta(seconds=600)
    estimates_refresh(now=now, force=True)
    e1 = WorkloadEstimate.objects.get(workload=p1)
    e2 = WorkloadEstimate.objects.get(workload=p2)
    assert close(e1.start, second) and close(e2.start, second + timedelta(seconds=600))
    # the range: its low end the start with no new work (p2 takes the second node)
    assert close(e2.low, second) and close(e2.high, second + timedelta(seconds=600))
    # with the live resolution (max(60 s, 2% x time ahead); 0 in these tests) both ends are
    # widened by half of it (the rows dropped first: a move within the resolution is not
    # written)
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "step_s": 60.0, "step_rel": 0.02}
    WorkloadEstimate.objects.all().delete()
    estimates_refresh(now=now, force=True)
    e2 = WorkloadEstimate.objects.get(workload=p2)

    def pad(t):
        return timedelta(seconds=max(60.0, 0.02 * (t - now).total_seconds()) / 2)

    assert close(e2.low, second - pad(second)) and close(e2.high, e2.start + pad(e2.start))
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "step_s": 0.0, "step_rel": 0.0}
    # five submissions in the last hour: r1, r2, p1, p2 and urgent (not the rejected one)
    assert "new work comes as in the last hour (5 submissions, each again an hour" in e1.assumes
    # the request form's forecast takes the same arrivals
    spec = build_snapshot(now, pending_limit=ALL_PENDING, record=False)[0].pending[0]
    got = request_estimate(spec=replace(spec, name="request"), hint_s=600, now=now)
    assert close(got.start, second + timedelta(seconds=600))
    assert "5 submissions" in got.assumes
    # the last hour's again for each of the next three hours: the text says so
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "arrivals_repeat": 3}
    estimates_refresh(now=now, force=True)
    assert ("new work comes in each of the next 3 periods as in the last hour (5 submissions, "
            "each again an hour, 2 hours, ..." in WorkloadEstimate.objects.get(workload=p1).assumes)
    # off: as before, no new work ahead
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "arrivals_s": 0.0, "arrivals_repeat": 1}
    estimates_refresh(now=now, force=True)
    e2 = WorkloadEstimate.objects.get(workload=p2)
    assert close(e2.start, second) and "Assumes no new work goes ahead" in e2.assumes


def test_arrivals_are_capped_at_the_newest(full, settings):
    from scheduling.workers.snapshot import arrival_specs

    world, r1, r2, p1, p2 = full
    now = timezone.now()
    snap, parts = build_snapshot(now, pending_limit=ALL_PENDING, record=False)
    specs, hints = arrival_specs(now, 3600.0, parts, limit=2)
    # the two newest, p1 and p2 (in submission order), renamed, an hour later, with hints
    assert [s.name for s in specs] == [f"~{p1.pk}", f"~{p2.pk}"]
    assert specs[0].submitted_at == pytest.approx(p1.submitted_at.timestamp() + 3600.0)
    assert hints == {f"~{p1.pk}": 600.0, f"~{p2.pk}": 600.0}
    assert specs[0].pod_sets == next(s for s in snap.pending if s.name == str(p1.pk)).pod_sets
    assert arrival_specs(now, 0.0, parts, limit=2) == ([], {})
    # again twice: each once an hour later, once two hours later
    twice, hints = arrival_specs(now, 3600.0, parts, limit=1, repeat=2)
    assert [(s.name, s.submitted_at) for s in twice] == [
        (f"~{p2.pk}", pytest.approx(p2.submitted_at.timestamp() + 3600.0)),
        (f"~~{p2.pk}", pytest.approx(p2.submitted_at.timestamp() + 7200.0))]
    assert hints == {f"~{p2.pk}": 600.0, f"~~{p2.pk}": 600.0}
    # submitted after `now` (committed while the forecast reads): not in the window
    assert arrival_specs(now - timedelta(hours=2), 3600.0, parts, limit=10) == ([], {})


def test_periods_in_words():
    from scheduling.workers.eta import coming_text, period

    assert [period(x) for x in (86400, 172800, 3600, 7200, 90000, 600)] == [
        "day", "2 days", "hour", "2 hours", "25.0 h", "10 min"]
    assert coming_text(0, 10) == "no new work goes ahead of it"
    assert coming_text(86400, 7) == ("new work comes as in the last day (7 submissions, each "
                                     "again a day after it was made)")
    assert coming_text(86400, 7, 3) == (
        "new work comes in each of the next 3 periods as in the last day (7 submissions, each "
        "again a day, 2 days, ... after it was made)")


def test_assumptions_say_how_a_long_wait_is_taken():
    from scheduling.engine.forecast import RunTimes
    from scheduling.workers.eta import assumes_text

    runtimes = RunTimes(by_queue={"q": (60.0, 120.0, 180.0, 240.0, 300.0)})
    plain = assumes_text("q", runtimes)
    assert plain.endswith("the start is the median of the starts simulated.")
    text = assumes_text("q", runtimes, long_wait_s=43200)
    assert text.endswith("the start is the median of the starts simulated; a start 12 hours or "
                         "more away moves halfway to the one with the runs ahead at their mean.")


def test_what_a_forecast_assumes_is_cut_at_a_clause():
    from scheduling.workers.eta import clipped

    text = "Run times: hints; the queue's runs. Assumes no new work; the fleet stays."
    assert clipped(text, 200) == text
    assert clipped(text, 60) == "Run times: hints; the queue's runs. Assumes no new work."
    assert clipped(text, 30) == "Run times: hints."
    assert clipped("a" * 40, 10) == "a" * 9 + "…"


def test_long_waits_setting_reaches_the_forecast_and_its_words(full, settings):
    world, r1, r2, p1, p2 = full
    now = timezone.now()
    first, second = ends(r1, r2)
    # An hour away is long with the threshold at 10 min: with every run time known (hints)
    # the chained fast-forward starts p2 at the same time, so the start does not move, and
    # the words say how a long wait is taken.
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "long_wait_s": 600.0}
    estimates_refresh(now=now, force=True)
    e2 = WorkloadEstimate.objects.get(workload=p2)
    assert close(e2.start, second)
    assert "a start 10 min or more away moves halfway" in e2.assumes
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "long_wait_s": 0.0}
    estimates_refresh(now=now, force=True)
    e2 = WorkloadEstimate.objects.get(workload=p2)
    assert close(e2.start, second) and "moves halfway" not in e2.assumes


def test_a_long_wait_without_hints_moves_halfway_to_the_runs_ahead_at_their_mean(
        settings, monkeypatch):
    # r1 and r2 hold both nodes for an hour (hints); p1, p2 and p3 (8 GPUs, no hints) wait.
    # The queue's runs: 600 s four times and 6,000 s once (mean 1,680 s, median 600 s).
    # p1 and p2 start at r1's and r2's ends; p3 when p1 ends: after 1,680 s in the mean-run
    # fast-forward, 600 s at p25 and p50, 4,920 s at p95, so the start is the median, 1,140 s
    # after r1's end. An hour and more away is long with the threshold at 10 min: with p1 at
    # its mean in the p50 one too, the median would be 1,680 s; the start moves halfway, to
    # 1,410 s.
    from scheduling.engine.forecast import RunTimes
    from scheduling.workers import eta

    runs = (600.0, 600.0, 600.0, 600.0, 6000.0)
    monkeypatch.setattr(eta, "runtimes_read", lambda now: RunTimes(
        by_queue={"rd/vision": runs}, fleet=runs, recent={"rd/vision": runs}))
    world = make_world(nodes_per_cluster=1)
    r1, _ = running_workload(world, "r1", 3600)
    r2, _ = running_workload(world, "r2", 3600)
    submit(world, "p1", duration_hint_s=None)
    submit(world, "p2", duration_hint_s=None)
    p3 = submit(world, "p3", duration_hint_s=None)
    first = ends(r1, r2)[0]
    now = timezone.now()
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "long_wait_s": 0.0}
    estimates_refresh(now=now, force=True)
    e3 = WorkloadEstimate.objects.get(workload=p3)
    assert close(e3.start, first + timedelta(seconds=1140))
    assert close(e3.low, first + timedelta(seconds=600))
    settings.ALLOT_ETA = {**settings.ALLOT_ETA, "long_wait_s": 600.0}
    estimates_refresh(now=now, force=True)
    e3 = WorkloadEstimate.objects.get(workload=p3)
    assert close(e3.start, first + timedelta(seconds=1410))
    assert close(e3.low, first + timedelta(seconds=600))
    assert close(e3.high, first + timedelta(seconds=4920))
