"""What-if on the live state (scheduling/whatif/): who may try what, the replay of both sides,
the progress and the scenario files."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling.models import WhatIf, WhatIfState
from scheduling.replay import load_scenario, run_scenario
from scheduling.whatif.services import what_if_run
from tests.integration.scheduling.world import make_world, running_workload, submit

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def busy():
    """One 8-GPU node per cluster, both busy for an hour; vision waits with two more."""
    world = make_world(nodes_per_cluster=1)
    running_workload(world, "r1", 3600)
    running_workload(world, "r2", 3600)
    submit(world, "p1", duration_hint_s=600)
    submit(world, "p2", duration_hint_s=600)
    return world


VISION_MIN = {"quotas": [{"queue": "rd/vision", "flavor": "a100-80g", "min": 4}]}


def test_researcher_is_refused(busy):
    r = api(busy.alice).post("/api/v1/what-if", {"hours": 2, "changes": VISION_MIN},
                             format="json")
    assert r.status_code == 403 and "admins and team leads" in r.json()["detail"]
    assert not WhatIf.objects.exists()


def test_lead_only_in_their_subtree_and_no_fleet_changes(busy):
    lead = api(busy.bob)  # lead of vision
    r = lead.post("/api/v1/what-if", {"hours": 2, "changes": {
        "quotas": [{"queue": "rd/nlp", "flavor": "a100-80g", "min": 0}]}}, format="json")
    assert r.status_code == 403 and "outside your subtree: rd/nlp" in r.json()["detail"]
    r = lead.post("/api/v1/what-if", {"hours": 2, "changes": {
        "add_nodes": [{"cluster": "bj", "flavor": "a100-80g", "count": 1}]}}, format="json")
    assert r.status_code == 403 and "only admins may try add_nodes" in r.json()["detail"]
    r = lead.post("/api/v1/what-if", {"hours": 2, "changes": VISION_MIN}, format="json")
    assert r.status_code == 202 and r.json()["state"] == "queued", r.json()


def test_bad_changes_name_the_field_and_save_nothing(busy):
    admin = api(busy.admin)
    r = admin.post("/api/v1/what-if", {"hours": 2, "changes": {
        "quotas": [{"queue": "rd/nope", "flavor": "a100-80g", "min": 1}]}}, format="json")
    assert r.status_code == 400 and r.json() == {"quotas[0].queue": ["no queue 'rd/nope'"]}
    r = admin.post("/api/v1/what-if", {"hours": 2, "changes": {
        "quotas": [{"queue": "rd/vision", "flavor": "a100-80g", "min": 99}]}}, format="json")
    assert r.status_code == 400 and "children's min" in " ".join(r.json()["changes"])
    r = admin.post("/api/v1/what-if", {"hours": 999, "changes": {}}, format="json")
    assert r.status_code == 400 and "at most 168" in r.json()["hours"][0]
    assert not WhatIf.objects.exists()


def test_adding_a_node_shortens_the_waits(busy):
    admin = api(busy.admin)
    r = admin.post("/api/v1/what-if", {"hours": 2, "repeat_past": False, "changes": {
        "add_nodes": [{"cluster": "bj", "flavor": "a100-80g", "count": 2, "gpus": 8}]}},
        format="json")
    assert r.status_code == 202
    pk = r.json()["id"]
    what_if_run(what_if_id=pk)
    body = admin.get(f"/api/v1/what-if/{pk}").json()
    assert body["state"] == "done" and body["progress"] == 1.0
    base, changed = body["result"]["baseline"], body["result"]["changed"]
    # As it stands p1 and p2 wait about an hour for r1 and r2 (placed again at 0, no wait);
    # with two more nodes p1 starts at once, and p2 waits only for vision's max of 24 GPUs
    # (r1, r2, p1), i.e. for p1's 600 s.
    assert base["queues"]["rd/vision"]["admitted"] == 4
    assert base["queues"]["rd/vision"]["p95_wait_s"] > 3500
    assert changed["queues"]["rd/vision"]["p95_wait_s"] == 600
    assert changed["gpu_hours"] > base["gpu_hours"] * 0.99
    assert base["guarantees_met"] is True and "cost" in changed
    # The scenario files replay with manage.py simulate's loader.
    doc = admin.get(f"/api/v1/what-if/{pk}/scenario?variant=changed").json()
    assert sum(n["count"] for c in doc["clusters"] for n in c["nodes"]) == 4
    out = run_scenario(load_scenario(doc))
    assert out["metrics"]["p95_wait_s"] == 600
    # Others see nothing of it.
    assert api(busy.alice).get(f"/api/v1/what-if/{pk}").status_code == 404


def test_page_starts_one_and_shows_both_sides(busy, client):
    client.force_login(busy.admin)
    r = client.get("/what-if/")
    assert r.status_code == 200 and 'id="start-what-if"' in r.content.decode()
    r = client.post("/what-if/", {"hours": "2", "queue": "rd/vision", "flavor": "a100-80g",
                                  "min": "4", "strategy": "spread"})
    run = WhatIf.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/what-if/{run.pk}/"
    assert run.changes["quotas"][0]["min"] == 4 and run.changes["strategy"] == "spread"
    page = client.get(f"/what-if/{run.pk}/").content.decode()
    assert 'id="what-if-progress"' in page and 'hx-trigger="every 2s"' in page
    what_if_run(what_if_id=run.pk)
    assert WhatIf.objects.get().state == WhatIfState.DONE
    page = client.get(f"/what-if/{run.pk}/").content.decode()
    assert 'id="what-if-summary"' in page and "rd/vision" in page and "every 2s" not in page
    client.force_login(busy.alice)
    assert client.get("/what-if/").status_code == 403
