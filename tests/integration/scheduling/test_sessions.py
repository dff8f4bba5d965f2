"""Interactive sessions (scheduling/sessions.py): idle culling from GPU telemetry, on a
simulated cluster (its DCGM exporter) and through the API, the page and the Celery task."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from billing.prometheus import PrometheusClient, Series, fetch_session_utilisation
from billing.tasks import cull_idle_sessions
from scheduling.backends.naming import LABEL_SIM_GPU_UTIL
from scheduling.backends.simulated.models import SimJob
from scheduling.models import (
    EndReason,
    EventCode,
    OutboxKind,
    OutboxMessage,
    Workload,
    WorkloadState,
)
from scheduling.services import workload_submit
from scheduling.sessions import (
    IdleLimit,
    session_idle_limit,
    sessions_cull,
    simulated_utilisation,
)
from scheduling.workers.cycle import cycle_run
from tests.integration.scheduling.world import request

pytestmark = pytest.mark.django_db
S = WorkloadState
QUIET = {LABEL_SIM_GPU_UTIL: "2"}


def notebook(world, name="nb", *, labels=None, gpus=8, **extra):
    body = request(name, gpus=gpus, image="quay.io/jupyter/pytorch-notebook:2024-10-07",
                   command=[], interactive=True, labels=labels or {}, **extra)
    body.pop("duration_hint_s")  # a session runs until stopped
    return workload_submit(user=world.alice, data=body, nudge=False)


def running(world, w):
    assert w.pk in cycle_run(wait=True).admitted
    w.refresh_from_db()
    assert w.state == S.RUNNING
    return w


def sim(now):
    return lambda sessions: simulated_utilisation(sessions, now)


@pytest.fixture
def limits(world):
    world.vision.idle_timeout_s = 1800
    world.vision.idle_gpu_util_pct = 10
    world.vision.save()
    return world


def test_a_quiet_notebook_is_warned_then_stopped_and_its_quota_released(
        limits, django_capture_on_commit_callbacks):
    world = limits
    world.alice.email = "alice@example.org"
    world.alice.save()
    w = running(world, notebook(world, labels=QUIET))
    waiting = workload_submit(user=world.alice, data=request("train", gpus=8, count=3),
                              nudge=False)
    cycle_run(wait=True)
    waiting.refresh_from_db()
    assert waiting.state == S.PENDING  # vision's max is 24: 8 + 24 does not fit
    t0 = timezone.now()

    report = sessions_cull(utilisation=sim(t0), now=t0)
    assert (report.sessions, report.read, report.idle) == (1, 1, 1)
    w.refresh_from_db()
    assert w.idle_since == t0 and w.idle_warned_at is None

    # A tenth of the limit (at most 10 min) before the stop: one warning, event and email.
    t1 = t0 + timedelta(seconds=1800 - 180)
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_cull(utilisation=sim(t1), now=t1).warned == [w.pk]
    assert sessions_cull(utilisation=sim(t1), now=t1 + timedelta(seconds=60)).warned == []
    warning = w.events.get(code=EventCode.IDLE_WARNING)
    assert "below 10%" in warning.message and "stopped in 3 min" in warning.message
    assert [m.subject for m in mail.outbox] == ["Session nb is idle and will be stopped"]
    assert mail.outbox[0].to == ["alice@example.org"]
    w.refresh_from_db()
    assert w.state == S.RUNNING and w.idle_warned_at == t1

    t2 = t0 + timedelta(seconds=1800)
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions_cull(utilisation=sim(t2), now=t2).stopped == [w.pk]
    w.refresh_from_db()
    assert w.state == S.CANCELLED and w.finished_at == t2
    adm = w.admissions.get()
    assert adm.end_reason == EndReason.IDLE and adm.ended_at == t2
    stopped = w.events.get(code=EventCode.IDLE_STOPPED)
    assert stopped.type == "cancelled" and "below 10% for 30 min" in stopped.message
    assert OutboxMessage.objects.filter(kind=OutboxKind.DELETE, admission_id=adm.pk).exists()
    assert mail.outbox[-1].subject == "Session nb was stopped idle"
    assert "files on its volume are kept" in mail.outbox[-1].body
    # Its quota is free for the next cycle (its nodes once the cluster confirms the delete).
    from scheduling.fleet.delivery import outbox_deliver
    outbox_deliver(now=t2)
    assert not SimJob.objects.filter(workload_id=w.pk).exists()  # deleted on the cluster
    cycle_run(wait=True)
    waiting.refresh_from_db()
    assert waiting.state in (S.RESERVED, S.RUNNING)


def test_a_busy_session_is_never_idle_and_a_quiet_spell_resets(limits):
    world = limits
    busy = running(world, notebook(world, "busy"))  # the simulated 40..95 % of its pods
    t0 = timezone.now()
    report = sessions_cull(utilisation=sim(t0), now=t0)
    assert (report.read, report.busy, report.idle) == (1, 1, 0)
    busy.refresh_from_db()
    assert busy.idle_since is None

    readings = {busy.pk: Decimal(3)}
    sessions_cull(utilisation=lambda s: readings, now=t0)
    sessions_cull(utilisation=lambda s: readings, now=t0 + timedelta(seconds=1700))
    busy.refresh_from_db()
    assert busy.idle_since == t0 and busy.idle_warned_at is not None
    readings[busy.pk] = Decimal(55)  # used again: the warning and the idle spell end
    sessions_cull(utilisation=lambda s: readings, now=t0 + timedelta(seconds=1750))
    busy.refresh_from_db()
    assert busy.idle_since is None and busy.idle_warned_at is None
    readings[busy.pk] = Decimal(3)
    later = t0 + timedelta(seconds=1800)
    assert sessions_cull(utilisation=lambda s: readings, now=later).stopped == []
    busy.refresh_from_db()
    assert busy.state == S.RUNNING and busy.idle_since == later


def test_no_reading_changes_nothing_however_long(limits):
    world = limits
    w = running(world, notebook(world, labels=QUIET))
    t0 = timezone.now()
    sessions_cull(utilisation=sim(t0), now=t0)
    later = t0 + timedelta(days=2)
    report = sessions_cull(utilisation=lambda s: {}, now=later)  # Prometheus down, say
    assert (report.sessions, report.read, report.stopped) == (1, 0, [])
    w.refresh_from_db()
    assert w.state == S.RUNNING


def test_batch_work_and_sessions_without_a_limit_are_left_alone(world):
    batch = workload_submit(user=world.alice, data=request("batch", labels=QUIET), nudge=False)
    nb = notebook(world, labels=QUIET)
    cycle_run(wait=True)
    t = timezone.now() + timedelta(days=30)
    assert sessions_cull(utilisation=sim(t), now=t).sessions == 0  # no limit on rd or vision
    for w in (batch, nb):
        w.refresh_from_db()
        assert w.state == S.RUNNING and w.idle_since is None


def test_limits_come_from_the_queue_its_ancestors_or_the_session_when_shorter(world):
    rd = world.vision.parent
    rd.idle_timeout_s, rd.idle_gpu_util_pct = 7200, 20
    rd.save()
    nb = notebook(world)
    assert session_idle_limit(nb) == IdleLimit(timeout_s=7200, threshold_pct=20)
    world.vision.idle_timeout_s = 3600
    world.vision.save()
    assert session_idle_limit(nb) == IdleLimit(timeout_s=3600, threshold_pct=20)
    own = notebook(world, "own", idle_timeout_s=900)
    assert session_idle_limit(own).timeout_s == 900
    longer = notebook(world, "longer", idle_timeout_s=86400)
    assert session_idle_limit(longer).timeout_s == 3600  # the queue's caps it
    assert IdleLimit(timeout_s=3600).warning_s == 360 and IdleLimit(86400).warning_s == 600


def test_bad_session_fields_are_refused_naming_field_and_numbers(world):
    with pytest.raises(ValidationError) as exc:
        workload_submit(user=world.alice, data=request("x", idle_timeout_s=900), nudge=False)
    assert exc.value.message_dict["idle_timeout_s"] == [
        "only an interactive session (interactive: true) has an idle limit"]
    with pytest.raises(ValidationError) as exc:
        notebook(world, idle_timeout_s=60)
    assert exc.value.message_dict["idle_timeout_s"] == ["60 < 300: must be at least 300"]
    with pytest.raises(ValidationError) as exc:
        workload_submit(user=world.alice, data=request("y", interactive="yes"), nudge=False)
    assert exc.value.message_dict["interactive"] == ["'yes' is not true or false"]
    assert not Workload.objects.exists()


def test_the_api_and_the_page_show_the_session_and_its_warning(limits, client):
    world = limits
    from tests.integration.api.conftest import client_for
    api = client_for(world.alice)
    body = request("lab", gpus=8, interactive=True, idle_timeout_s=1200, labels=QUIET)
    body.pop("duration_hint_s")
    answer = api.post("/api/v1/workloads", body, format="json")
    assert answer.status_code == 201, answer.json()
    data = answer.json()
    assert data["interactive"] is True
    assert data["idle"]["timeout_s"] == 1200 and data["idle"]["threshold_pct"] == 10
    bad = api.post("/api/v1/workloads", {**body, "name": "lab2", "idle_timeout_s": 10},
                   format="json")
    assert bad.status_code == 400 and "idle_timeout_s" in bad.json()
    w = Workload.objects.get(pk=data["id"])
    running(world, w)
    t0 = timezone.now() - timedelta(seconds=1100)
    sessions_cull(utilisation=sim(t0), now=t0)
    sessions_cull(utilisation=sim(t0), now=timezone.now())
    data = api.get(f"/api/v1/workloads/{w.pk}").json()
    assert data["idle"]["warned_at"] is not None and data["idle"]["stops_at"] is not None
    client.force_login(world.alice)
    page = client.get(reverse("workload-detail", args=[w.pk])).content.decode()
    assert 'id="idle-warning"' in page and "it will be stopped at" in page
    assert f"kubectl port-forward -n rd-vision job/allot-w{w.pk}-0 8888:8888" in page


def test_the_task_reads_the_simulated_exporter_without_prometheus(limits, settings):
    settings.ALLOT_PROMETHEUS_URL = ""
    world = limits
    w = running(world, notebook(world, labels=QUIET))
    assert cull_idle_sessions() == {"sessions": 1, "read": 1, "warned": [], "stopped": [],
                                    "time_warned": [], "timed_out": []}
    w.refresh_from_db()
    assert w.idle_since is not None


class FakePrometheus(PrometheusClient):
    def __init__(self, series):
        super().__init__("http://prometheus.invalid")
        self.series, self.queries = series, []

    def query_range(self, query, *, start, end, step_s=60):
        self.queries.append((query, start, end))
        return self.series


def test_prometheus_readings_take_each_sessions_busiest_gpu():
    at = timezone.now()
    ts = int(at.timestamp())
    series = [
        Series({"pod": "allot-w7-0-abcde", "namespace": "rd-vision"}, [(ts, Decimal(3))]),
        Series({"pod": "allot-w7-0-fghij", "namespace": "rd-vision"}, [(ts, Decimal(12))]),
        # Prometheus' own target labels win as exported_*.
        Series({"pod": "dcgm-exporter-x", "exported_pod": "allot-w8-0-abcde"},
               [(ts, Decimal(0))]),
        Series({"pod": "allot-w9-0-abcde"}, [(ts, Decimal(1))]),  # not asked for
        Series({"pod": "jupyter-someone"}, [(ts, Decimal(0))]),  # not Allot's
    ]
    fake = FakePrometheus(series)
    assert fetch_session_utilisation(fake, {7, 8}, at) == {7: Decimal(12), 8: Decimal(0)}
    query, start, end = fake.queries[0]
    assert query.startswith("max by (") and "DCGM_FI_DEV_GPU_UTIL[60s]" in query
    assert start == end == at
