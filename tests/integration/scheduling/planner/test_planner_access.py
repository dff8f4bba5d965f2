"""Who reaches the capacity planner's pages (what-if, trace replay, recommendations): the
navigation links per role, and each page's and API's answer per role (admin: everything; a
lead: their own subtree only; a researcher: nothing)."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile

from scheduling.models import TraceReplay, WhatIf
from tests.integration.scheduling.planner.test_trace_replay import PHILLY
from tests.integration.scheduling.world import make_world

pytestmark = pytest.mark.django_db

PAGES = {"/what-if/": "What-if", "/planner/replay/": "Planner",
         "/planner/recommendations/": "Recommendations"}


@pytest.fixture
def world():
    cache.clear()
    return make_world()


def nav(client) -> str:
    html = client.get("/workloads/").content.decode()
    return html.split('id="main-nav"')[1].split("</nav>")[0]


def test_admin_sees_every_planner_link_and_page(world, client):
    client.force_login(world.admin)
    links = nav(client)
    for url, label in PAGES.items():
        assert f'<a href="{url}">{label}</a>' in links
        page = client.get(url)
        assert page.status_code == 200, url
        assert "rd/nlp" in page.content.decode() and "rd/vision" in page.content.decode()


def test_lead_sees_the_links_and_only_their_subtree(world, client):
    client.force_login(world.bob)  # lead of vision
    links = nav(client)
    for url, label in PAGES.items():
        assert f'<a href="{url}">{label}</a>' in links
    assert client.get("/what-if/").status_code == 200
    # Each page offers the lead's queue only.
    whatif = client.get("/what-if/").content.decode()
    assert "<option>rd/vision</option>" in whatif and "<option>rd/nlp</option>" not in whatif
    replay = client.get("/planner/replay/").content.decode()
    assert 'name="max:rd/vision|a100-80g|gpu"' in replay
    assert "rd/nlp|" not in replay and "|rd|" not in replay and 'max:rd|' not in replay
    recs = client.get("/planner/recommendations/")
    assert recs.status_code == 200
    body = recs.content.decode()
    assert "rd/vision" in body and "rd/nlp" not in body
    # Changes outside the subtree are refused, on the pages and in the API.
    r = client.post("/what-if/", {"hours": "1", "queue": "rd/nlp", "flavor": "a100-80g",
                                  "max": "4"})
    assert r.status_code == 403 and not WhatIf.objects.exists()
    r = client.post("/api/v1/trace-replays", {
        "file": SimpleUploadedFile("p.csv", PHILLY.encode()),
        "changes": json.dumps({"quotas": [{"queue": "rd", "flavor": "a100-80g", "max": 8}]})})
    assert r.status_code == 403 and not TraceReplay.objects.exists()
    r = client.get("/api/v1/recommendations?days=1")
    assert {row["queue"] for row in r.json()["results"]} <= {"rd/vision"}
    # Another user's replay is not theirs to read.
    other = TraceReplay.objects.create(owner=world.admin, created_at="2026-01-01T00:00Z",
                                       name="x", kind="philly")
    assert client.get(f"/planner/replay/{other.pk}/").status_code == 404
    assert client.get(f"/api/v1/trace-replays/{other.pk}").status_code == 404


@pytest.mark.parametrize("who", ["alice", "carol"])
def test_researcher_has_no_planner_link_and_no_page(world, client, who):
    client.force_login(getattr(world, who))
    links = nav(client)
    for url, label in PAGES.items():
        assert f'href="{url}"' not in links and f">{label}<" not in links
        assert client.get(url).status_code == 403, url
    assert client.get("/api/v1/recommendations").status_code == 403
    r = client.post("/api/v1/what-if", {"hours": 1}, content_type="application/json")
    assert r.status_code == 403
    r = client.post("/api/v1/trace-replays",
                    {"file": SimpleUploadedFile("p.csv", PHILLY.encode())})
    assert r.status_code == 403 and not TraceReplay.objects.exists()
