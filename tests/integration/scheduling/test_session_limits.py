"""A session's time limit and its one-click extension (scheduling/session_time.py): granted and
honoured by the cull, refused past its policy's longest, during a reclaim or by a budget check,
by the API, the page and the service; session policies (policies/sessions.py) setting the idle
limits with the most specific winning, shown with their sources."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from policies.models import SessionPolicy
from scheduling import extensions
from scheduling.models import (
    Admission,
    EndReason,
    EventCode,
    OutboxKind,
    OutboxMessage,
    Workload,
    WorkloadState,
)
from scheduling.services import workload_submit
from scheduling.session_time import session_extend, sessions_time_limit
from scheduling.sessions import session_idle_limit, session_idle_state, sessions_cull
from tests.integration.api.conftest import client_for
from tests.integration.scheduling.test_sessions import QUIET, notebook, running, sim
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db
S = WorkloadState


def started(w: Workload):
    return Admission.objects.get(workload=w, ended_at__isnull=True).running_at


def test_an_extension_moves_the_stop_and_the_cull_honours_it(world, client,
                                                             django_capture_on_commit_callbacks):
    world.alice.email = "alice@example.org"
    world.alice.save()
    w = running(world, notebook(world, time_limit_s=3600))
    t0 = started(w)
    assert sessions_time_limit(now=t0 + timedelta(seconds=3000)).warned == []
    with django_capture_on_commit_callbacks(execute=True):
        report = sessions_time_limit(now=t0 + timedelta(seconds=3240))  # 6 min before
    assert (report.warned, report.stopped) == ([w.pk], [])
    warning = w.events.get(code=EventCode.TIME_LIMIT_WARNING)
    assert "stopped in 6 min" in warning.message and "unless it is extended" in warning.message
    assert mail.outbox[-1].subject == "Session nb reaches its time limit soon"
    assert f"allot extend {w.pk} --hours N" in mail.outbox[-1].body
    assert sessions_time_limit(now=t0 + timedelta(seconds=3500)).warned == []  # once
    client.force_login(world.alice)
    page = client.get(reverse("workload-detail", args=[w.pk])).content.decode()
    assert 'id="time-limit-warning"' not in page  # the page reads the real clock: not yet

    api = client_for(world.alice)
    answer = api.post(f"/api/v1/workloads/{w.pk}/extend", {"hours": 1}, format="json")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["time_limit_s"] == 7200
    assert body["workload"]["idle"]["time_limit_s"] == 7200
    assert body["workload"]["idle"]["sources"]["time_limit_s"] == "the session's own"
    event = w.events.get(code=EventCode.SESSION_EXTENDED)
    assert event.payload["time_limit_s"] == 7200 and "by 1 h to 2 h" in event.message
    assert event.actor == world.alice

    assert sessions_time_limit(now=t0 + timedelta(seconds=3601)).stopped == []
    w.refresh_from_db()
    assert w.state == S.RUNNING  # the old limit passed: the new one counts
    assert sessions_time_limit(now=t0 + timedelta(seconds=6700)).warned == [w.pk]  # new limit
    report = sessions_time_limit(now=t0 + timedelta(seconds=7200))
    assert report.stopped == [w.pk]
    w.refresh_from_db()
    assert w.state == S.CANCELLED
    assert Admission.objects.get(workload=w).end_reason == EndReason.TIME_LIMIT
    stop = w.events.get(code=EventCode.TIME_LIMIT_STOPPED)
    assert "2 h" not in stop.message and "120 min of running" in stop.message
    assert OutboxMessage.objects.filter(kind=OutboxKind.DELETE).count() == 1


def test_past_the_policy_longest_the_extension_is_refused_with_the_numbers(world):
    SessionPolicy.objects.create(name="rd-short", queues=["rd"], max_time_s=7200)
    w = running(world, notebook(world, time_limit_s=5400))
    api = client_for(world.alice)
    answer = api.post(f"/api/v1/workloads/{w.pk}/extend", {"hours": 1}, format="json")
    assert answer.status_code == 409
    body = answer.json()
    assert [r["code"] for r in body["reasons"]] == ["SESSION_MAX_TIME"]
    assert body["reasons"][0]["message"] == (
        "1.5 h + 1 h = 2.5 h is over the 2 h a session may run in rd/vision (policy rd-short)")
    w.refresh_from_db()
    assert w.time_limit_s == 5400  # unchanged
    refused = w.events.get(code=EventCode.EXTENSION_REFUSED)
    assert refused.payload["reasons"][0]["code"] == "SESSION_MAX_TIME"

    done = session_extend(user=world.alice, workload=w, hours="0.5")
    assert done.refused == [] and done.time_limit_s == 7200


def test_a_reclaim_pending_on_borrowed_capacity_or_a_budget_check_refuses(world):
    w = running(world, notebook(world, time_limit_s=3600))
    Admission.objects.filter(workload=w).update(borrowed=True)
    other = workload_submit(user=world.carol, data=request("wants-back", gpus=8, queue="rd/nlp"),
                            nudge=False)
    Workload.objects.filter(pk=other.pk).update(nomination={
        "flavor": "a100-80g", "at": "bj", "victims": [
            {"name": w.name, "queue": "rd/vision", "cluster": "bj", "nodes": [], "pods": []}]})
    done = session_extend(user=world.alice, workload=w, hours=1)
    assert [c for c, _ in done.refused] == ["RECLAIM_PENDING"]
    assert f"#{other.pk} wants-back is reclaiming" in done.refused[0][1]
    Workload.objects.filter(pk=other.pk).update(nomination=None)

    def over_budget(workload, extra_s, now):
        return [("BUDGET_EXCEEDED", f"vision is over its budget; {extra_s} s more refused")]

    extensions.register_session_extension_check(over_budget)
    try:
        done = session_extend(user=world.alice, workload=w, hours=1)
    finally:
        extensions._session_extension_checks.remove(over_budget)
    assert done.refused == [("BUDGET_EXCEEDED", "vision is over its budget; 3600 s more refused")]
    w.refresh_from_db()
    assert w.time_limit_s == 3600
    assert w.events.filter(code=EventCode.EXTENSION_REFUSED).count() == 2
    assert session_extend(user=world.alice, workload=w, hours=1).time_limit_s == 7200
    Workload.objects.filter(pk=w.pk).update(state=S.PREEMPTING)
    done = session_extend(user=world.alice, workload=w, hours=1)
    assert done.refused == [("RECLAIM_PENDING",
                             "nb is being preempted: its capacity is being reclaimed")]


def test_bad_extensions_are_refused_naming_the_field_and_numbers(world):
    w = notebook(world, time_limit_s=3600)
    api = client_for(world.alice)
    url = f"/api/v1/workloads/{w.pk}/extend"
    assert api.post(url, {"hours": "soon"}, format="json").json() == {
        "hours": ["'soon' is not a number of hours"]}
    assert api.post(url, {"hours": 0}, format="json").json() == {
        "hours": ["0 is not between 0 and 168 hours (exclusive of 0)"]}
    assert api.post(url, {"hours": 200}, format="json").status_code == 400
    assert api.post(url, {"hours": 1, "days": 2}, format="json").json() == {
        "days": ["unknown field (only: hours)"]}
    assert api.post(url, {}, format="json").json() == {"hours": ["required: the hours to add"]}
    assert client_for(world.carol).post(url, {"hours": 1}, format="json").status_code in (403,
                                                                                         404)
    batch = workload_submit(user=world.alice, data=request("train", gpus=8), nudge=False)
    bad = api.post(f"/api/v1/workloads/{batch.pk}/extend", {"hours": 1}, format="json")
    assert bad.status_code == 400 and "not an interactive session" in bad.json()["hours"][0]
    w.refresh_from_db()
    assert w.time_limit_s == 3600 and not w.events.filter(
        code__in=[EventCode.SESSION_EXTENDED, EventCode.EXTENSION_REFUSED]).exists()
    with pytest.raises(ValidationError) as exc:
        workload_submit(user=world.alice, data=request("x", time_limit_s=3600), nudge=False)
    assert exc.value.message_dict["time_limit_s"] == [
        "only an interactive session (interactive: true) has a time limit"]
    with pytest.raises(ValidationError) as exc:
        notebook(world, "short", time_limit_s=60)
    assert exc.value.message_dict["time_limit_s"] == ["60 < 300: must be at least 300"]


def test_the_page_has_keyboard_reachable_extend_buttons_that_extend(world, client):
    w = running(world, notebook(world, time_limit_s=3600))
    client.force_login(world.alice)
    Admission.objects.filter(workload=w).update(
        running_at=timezone.now() - timedelta(seconds=3300))  # 5 min left: the banner
    page = client.get(reverse("workload-detail", args=[w.pk])).content.decode()
    assert 'id="time-limit-warning"' in page and "unless it is extended" in page
    assert '<button type="submit" name="hours" value="1" id="extend-1h">+1 h</button>' in page
    assert 'id="session-time-limit">3600 s of running (from the session&#x27;s own)' in page
    answer = client.post(reverse("workload-extend", args=[w.pk]), {"hours": "4"}, follow=True)
    assert "time limit is now 5 h" in answer.content.decode()
    w.refresh_from_db()
    assert w.time_limit_s == 5 * 3600


def test_policies_set_idle_limits_the_most_specific_winning(world, client):
    world.vision.idle_timeout_s, world.vision.idle_gpu_util_pct = 1800, 10
    world.vision.save()
    SessionPolicy.objects.create(name="rd-wide", queues=["rd"], idle_timeout_s=600,
                                 idle_gpu_util_pct=20)
    w = notebook(world, labels=QUIET)
    limit = session_idle_limit(w)
    # The queue's own setting (depth 2) beats a policy on its parent (depth 1).
    assert (limit.timeout_s, limit.threshold_pct) == (1800, 10)
    assert limit.sources == {"timeout_s": "queue rd/vision", "threshold_pct": "queue rd/vision",
                             "max_time_s": "none set"}

    SessionPolicy.objects.create(name="vision-strict", queues=["rd/vision"], idle_timeout_s=900)
    SessionPolicy.objects.create(name="vision-lax", queues=["rd/vision"], idle_timeout_s=1500)
    limit = session_idle_limit(w)
    # At the same depth a policy beats the queue; of two policies, the stricter.
    assert (limit.timeout_s, limit.sources["timeout_s"]) == (900, "policy vision-strict")

    SessionPolicy.objects.create(name="alice-long", users=["alice"], idle_timeout_s=3600)
    SessionPolicy.objects.create(name="carol-short", users=["carol"], idle_timeout_s=300)
    SessionPolicy.objects.create(name="off", users=["alice"], queues=["rd/vision"],
                                 idle_timeout_s=60, enabled=False)
    limit = session_idle_limit(w)
    # Naming the user beats any queue path; another user's and disabled policies do nothing.
    assert (limit.timeout_s, limit.sources["timeout_s"]) == (3600, "policy alice-long")
    assert (limit.threshold_pct, limit.sources["threshold_pct"]) == (10, "queue rd/vision")

    w = running(world, w)
    t0 = timezone.now()
    sessions_cull(utilisation=sim(t0), now=t0)
    assert sessions_cull(utilisation=sim(t0), now=t0 + timedelta(seconds=1800)).stopped == []
    assert sessions_cull(utilisation=sim(t0), now=t0 + timedelta(seconds=3600)).stopped == [w.pk]

    state = session_idle_state(w)
    assert state is not None and state["sources"]["timeout_s"] == "policy alice-long"
    client.force_login(world.alice)
    page = client.get(reverse("workload-detail", args=[w.pk])).content.decode()
    assert ('id="session-limit-sources">3600 s (from policy alice-long); threshold 10% '
            "(from queue rd/vision)") in page


def test_a_policy_longest_is_a_time_limit_and_bad_policies_name_the_field(world):
    SessionPolicy.objects.create(name="day", users=["alice"], max_time_s=8 * 3600)
    w = running(world, notebook(world))
    state = session_idle_state(w)
    assert state is not None
    assert (state["time_limit_s"], state["sources"]["time_limit_s"]) == (28800, "policy day")
    assert state["ends_at"] == started(w) + timedelta(hours=8)
    done = session_extend(user=world.alice, workload=w, hours=1)
    assert [c for c, _ in done.refused] == ["SESSION_MAX_TIME"]

    bad = SessionPolicy(name="bad", queues="rd")
    with pytest.raises(ValidationError) as exc:
        bad.full_clean()
    assert exc.value.message_dict["queues"] == ["'rd' is not a list of names"]
    assert exc.value.message_dict["idle_timeout_s"] == [
        "set at least one of idle_timeout_s, idle_gpu_util_pct, max_time_s"]
