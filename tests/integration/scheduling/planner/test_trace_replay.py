"""The capacity planner's trace replay (scheduling/planner/): uploads read and refused, the
three sides replayed, who may do what, the page and its plots."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from scheduling.models import TraceReplay, WhatIfState
from scheduling.planner.services import trace_replay_read, trace_replay_run
from scheduling.replay import load_scenario, run_scenario
from tests.integration.scheduling.world import make_world

pytestmark = pytest.mark.django_db

# vision asks three 8-GPU jobs at once for an hour; "other" (no such leaf) one 4-GPU job.
PHILLY = (
    "timestamp,duration,num_gpus,gpu_time,cluster\n"
    "2017-10-09 07:00:00,3600,8,28800,vision\n"
    "2017-10-09 07:00:00,3600,8,28800,vision\n"
    "2017-10-09 07:00:00,3600,8,28800,vision\n"
    "2017-10-09 07:00:30,600,4,2400,other\n"
)
VISION_16 = {"quotas": [{"queue": "rd/vision", "flavor": "a100-80g", "max": 16}]}


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def world():
    return make_world(nodes_per_cluster=4)


def upload(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/csv")


def test_philly_trace_under_static_current_and_proposed(world):
    admin = api(world.admin)
    r = admin.post("/api/v1/trace-replays", {"file": upload("philly.csv", PHILLY),
                                             "changes": json.dumps(VISION_16)},
                   format="multipart")
    assert r.status_code == 202, r.json()
    body = r.json()
    # The request stores the file; the task reads it.
    assert body["state"] == "queued" and body["kind"] == "philly" and body["workloads"] == 0
    assert body["tenants"] is None and body["problems"] == {}
    assert bytes(TraceReplay.objects.get().upload) == PHILLY.encode()
    trace_replay_run(replay_id=body["id"])
    body = admin.get(f"/api/v1/trace-replays/{body['id']}").json()
    assert body["state"] == "done" and body["progress"] == 1.0 and body["workloads"] == 4
    # vision by name; "other" by rank onto the leaf with the largest min (a tie: rd/nlp first).
    assert body["tenants"] == {"other": "nlp", "vision": "vision"}
    assert TraceReplay.objects.get().upload is None
    static, current, proposed = (body["result"][v]["queues"]["rd/vision"]
                                 for v in ("static", "current", "proposed"))
    # Static (max 8): one job at a time, the last waits two hours; current (max 24): none
    # waits; proposed (max 16): two at once, the third waits an hour.
    assert static["p95_wait_s"] >= 7200 and current["p95_wait_s"] < 120
    assert 3600 <= proposed["p95_wait_s"] < 3800
    assert static["wait_quantiles_s"]["50"] >= 3600
    for side in body["result"].values():
        assert len(side["allocation"]["gpus"]) == 96 and side["fleet_gpus"] == 64
        assert 0 < side["jain_fairness"] <= 1 and 0 <= side["guarantees_met_share"] <= 1
    assert max(body["result"]["current"]["allocation"]["gpus"]) >= 24
    assert max(body["result"]["static"]["allocation"]["gpus"]) <= 12
    # Each side downloads as a scenario that replays the same.
    doc = admin.get(f"/api/v1/trace-replays/{body['id']}/scenario?variant=static").json()
    assert run_scenario(load_scenario(doc))["metrics"]["p95_wait_s"] >= 7200
    assert api(world.alice).get(f"/api/v1/trace-replays/{body['id']}").status_code == 404


def test_alibaba_trace_and_a_scenario_file(world):
    admin = api(world.admin)
    alibaba = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
               "creation_time,deletion_time,scheduled_time\n"
               "p0,8000,16384,1,500,,LS,Running,0,3600,0\n"
               "p1,8000,16384,2,1000,,BE,Running,60,7260,60\n"
               "p2,4000,8192,0,0,,BE,Running,60,7260,60\n")
    r = admin.post("/api/v1/trace-replays", {"name": "openb.csv", "content": alibaba},
                   format="json")
    assert r.status_code == 202, r.json()
    assert r.json()["kind"] == "alibaba"
    trace_replay_run(replay_id=r.json()["id"])
    body = admin.get(f"/api/v1/trace-replays/{r.json()['id']}").json()
    assert body["workloads"] == 2 and body["notes"] == ["1 pods without a GPU left out"]
    run = TraceReplay.objects.get(pk=r.json()["id"])
    pods = [w["pods"] for w in run.scenarios["current"]["workloads"]]
    assert pods[0][0]["gpus"] == 0.5 and pods[1][0]["gpus"] == 2
    scenario = {"until": 600, "flavors": [{"name": "g"}],
                "clusters": [{"name": "c", "nodes": [{"count": 1, "flavor": "g", "gpus": 8,
                                                      "cpu": 64, "memory_gib": 512}]}],
                "queues": [{"name": "a", "quota": {"g": {"gpu": {"min": 4, "max": 8}}}},
                           {"name": "b", "quota": {"g": {"gpu": {"min": 4, "max": 8}}}}],
                "workloads": [{"name": "w1", "queue": "a", "submit_at": 0, "duration_s": 100,
                               "pods": [{"count": 1, "flavors": ["g"], "gpus": 8}]}]}
    r = admin.post("/api/v1/trace-replays", {
        "file": SimpleUploadedFile("s.json", json.dumps(scenario).encode()),
        "changes": json.dumps({"quotas": [{"queue": "a", "flavor": "g", "max": 4}]})},
        format="multipart")
    assert r.status_code == 202, r.json()
    trace_replay_run(replay_id=r.json()["id"])
    result = TraceReplay.objects.get(pk=r.json()["id"]).result
    # w1 asks 8 GPUs: within max 8 now; never under static quotas (max = min 4) nor the
    # proposal (max 4).
    assert result["current"]["queues"]["a"]["admitted"] == 1
    assert result["static"]["queues"]["a"]["never_admitted"] == 1
    assert result["proposed"]["queues"]["a"]["never_admitted"] == 1


@pytest.mark.parametrize(("name", "text", "field", "words"), [
    ("p.csv", PHILLY.replace("3600,8,28800,vision\n2017", "36x0,8,28800,vision\n2017", 1),
     "line 2: duration", "'36x0' is not a number"),
    ("p.csv", PHILLY.replace(",8,28800,vision", ",0,0,vision", 1), "line 2: num_gpus",
     "0 < 1"),
    ("p.csv", PHILLY.replace("2017-10-09 07:00:30", "yesterday"), "line 5: timestamp",
     "'yesterday' is not YYYY-MM-DD HH:MM:SS"),
    ("p.csv", "timestamp,num_gpus,cluster\n2017-10-09 07:00:00,1,a\n", "file",
     "missing: duration"),
    ("s.json", "{not json", "file", "not valid JSON"),
    ("a.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
              "p0,1000,1024,1,1500,0,10\n", "line 2: gpu_milli", "1500 > 1000"),
    ("p.csv", PHILLY.replace(",vision\n", ",vision\n\xff", 1), "file", "not UTF-8 text"),
])
def test_bad_uploads_fail_in_the_task_naming_line_and_field(world, client, name, text, field,
                                                            words):
    r = api(world.admin).post("/api/v1/trace-replays", {
        "file": SimpleUploadedFile(name, text.encode("latin-1" if "\xff" in text else "utf-8"))},
        format="multipart")
    assert r.status_code == 202, r.json()
    trace_replay_run(replay_id=r.json()["id"])
    body = api(world.admin).get(f"/api/v1/trace-replays/{r.json()['id']}").json()
    assert body["state"] == "failed", body
    assert field in body["problems"] and words in " ".join(body["problems"][field]), body
    # Nothing half-saved: no scenario, no workloads, the upload dropped.
    run = TraceReplay.objects.get()
    assert run.scenarios == {} and run.workloads == 0 and run.result is None
    assert run.upload is None
    client.force_login(world.admin)
    page = client.get(f"/planner/replay/{run.pk}/").content.decode()
    assert 'id="trace-replay-problems"' in page and field in page
    assert words.replace("'", "&#x27;").replace(">", "&gt;").replace("<", "&lt;") in page


def test_the_request_refuses_only_what_is_cheap(world):
    r = api(world.admin).post("/api/v1/trace-replays",
                              {"file": upload("x.txt", "hello,world\n1,2\n")},
                              format="multipart")
    assert r.status_code == 400 and "not a trace this page reads" in r.json()["file"][0]
    r = api(world.admin).post("/api/v1/trace-replays", {"file": upload("p.csv", "  \n")},
                              format="multipart")
    assert r.status_code == 400 and r.json()["file"] == ["the file is empty"]
    # JSON that is not an object (schemathesis sent `[null, null]`: a 500 before).
    for body in ([None, None], 3, "text"):
        r = api(world.admin).post("/api/v1/trace-replays", body, format="json")
        assert r.status_code == 400, body
        assert "expected a JSON object" in r.json()["non_field_errors"][0]
    assert not TraceReplay.objects.exists()


def test_reading_reports_progress(world, monkeypatch):
    monkeypatch.setattr("scheduling.planner.traces.REPORT_EVERY", 2)
    r = api(world.admin).post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY)},
                              format="multipart")
    seen: list[float] = []
    fields = trace_replay_read(run=TraceReplay.objects.get(), report=seen.append)
    # Lines 2 and 4 of the five.
    assert seen == [0.4, 0.8] and fields["workloads"] == 4
    assert TraceReplay.objects.get().scenarios == {}
    trace_replay_run(replay_id=r.json()["id"])
    assert TraceReplay.objects.get().progress == 1.0


def test_limits_and_bad_proposals(world, settings):
    admin = api(world.admin)
    settings.ALLOT_PLANNER_MAX_JOBS = 3
    r = admin.post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY)},
                   format="multipart")
    assert r.status_code == 202
    trace_replay_run(replay_id=r.json()["id"])
    run = TraceReplay.objects.get()
    assert run.state == "failed" and "more than 3 jobs (line 5)" in run.problems["file"][0]
    run.delete()
    settings.ALLOT_PLANNER_MAX_JOBS = 100
    settings.ALLOT_PLANNER_MAX_UPLOAD_BYTES = 50
    r = admin.post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY)},
                   format="multipart")
    assert r.status_code == 400 and "> the limit of 50" in r.json()["file"][0]
    settings.ALLOT_PLANNER_MAX_UPLOAD_BYTES = 10_000
    r = admin.post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY), "changes": json.dumps(
        {"quotas": [{"queue": "rd/vision", "flavor": "a100-80g", "min": 99}]})},
        format="multipart")
    assert r.status_code == 400 and "children's min" in json.dumps(r.json())
    r = admin.post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY), "flavor": "h100"},
                   format="multipart")
    assert r.status_code == 400 and "'h100': no ready node has it" in r.json()["flavor"][0]
    assert not TraceReplay.objects.exists()
    # A lead only within their subtree; a researcher not at all.
    r = api(world.bob).post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY),
                            "changes": json.dumps({"quotas": [
                                {"queue": "rd/nlp", "flavor": "a100-80g", "max": 8}]})},
                            format="multipart")
    assert r.status_code == 403 and "outside your subtree: rd/nlp" in r.json()["detail"]
    r = api(world.alice).post("/api/v1/trace-replays", {"file": upload("p.csv", PHILLY)},
                              format="multipart")
    assert r.status_code == 403 and not TraceReplay.objects.exists()


def test_page_uploads_edits_and_plots(world, client):
    client.force_login(world.admin)
    page = client.get("/planner/replay/").content.decode()
    assert 'id="start-trace-replay"' in page and 'name="max:rd/vision|a100-80g|gpu"' in page
    r = client.post("/planner/replay/", {"file": upload("philly.csv", PHILLY),
                                         "max:rd/vision|a100-80g|gpu": "16",
                                         "min:rd/vision|a100-80g|gpu": "8"})
    run = TraceReplay.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/planner/replay/{run.pk}/"
    assert run.changes == {"quotas": [{"queue": "rd/vision", "flavor": "a100-80g",
                                       "resource": "gpu", "max": 16}]}
    page = client.get(f"/planner/replay/{run.pk}/").content.decode()
    assert 'id="trace-replay-progress"' in page and 'hx-trigger="every 2s"' in page
    trace_replay_run(replay_id=run.pk)
    assert TraceReplay.objects.get().state == WhatIfState.DONE
    r = client.get(f"/planner/replay/{run.pk}/", HTTP_HX_REQUEST="true")
    assert r.status_code == 204 and r["HX-Refresh"] == "true"
    page = client.get(f"/planner/replay/{run.pk}/").content.decode()
    for chart in ("chart-waits", "chart-wait-dist", "chart-allocation", "chart-fairness"):
        assert f'id="{chart}-data"' in page
    assert 'id="trace-replay-summary"' in page and "rd/vision" in page
    # A bad number on the page: a 400 naming the row, nothing saved.
    r = client.post("/planner/replay/", {"file": upload("philly.csv", PHILLY),
                                         "max:rd/vision|a100-80g|gpu": "lots"})
    assert r.status_code == 400 and "rd/vision a100-80g/gpu max" in r.content.decode()
    assert TraceReplay.objects.count() == 1
    client.force_login(world.alice)
    assert client.get("/planner/replay/").status_code == 403
