"""Min/Max recommendations (billing/recommend/): demand read from the usage records and the
pending work, the proposal and its evidence, filing it as a capacity request, replaying it
over the history; who may do what; bad options."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from billing.metering import hour_floor
from billing.models import UsageRecord
from quotas.capacity.models import CapacityRequest
from scheduling.models import TraceReplay, Workload
from scheduling.planner.services import trace_replay_run
from tests.integration.scheduling.world import make_world, submit

pytestmark = pytest.mark.django_db
DAYS = 3


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def usage(hour, queue: str, gpus: int, admission_id: int) -> UsageRecord:
    return UsageRecord(
        hour=hour, admission_id=admission_id, workload_id=admission_id,
        workload_name=f"w{admission_id}", phase="running", start=hour,
        end=hour + timedelta(hours=1), cluster="bj", flavor="a100-80g", queue=queue,
        gpus=Decimal(gpus), cpu=Decimal(8), memory_gib=Decimal(64),
        gpu_hours=Decimal(gpus), core_hours=Decimal(8), memory_gib_hours=Decimal(64),
        computed_at=hour + timedelta(hours=1))


@pytest.fixture
def history():
    """Three days: vision uses 20 GPUs every hour (min 8), nlp 2 (min 8); one 8-GPU vision
    job has waited the last two hours."""
    world = make_world()
    end = hour_floor(timezone.now())
    rows = []
    for i in range(DAYS * 24):
        hour = end - timedelta(hours=DAYS * 24 - i)
        rows += [usage(hour, "rd/vision", 20, 2 * i + 1), usage(hour, "rd/nlp", 2, 2 * i + 2)]
    UsageRecord.objects.bulk_create(rows)
    w = submit(world, "waiting", gpus=8)
    Workload.objects.filter(pk=w.pk).update(submitted_at=end - timedelta(hours=2))
    return world


def by_key(results) -> dict[tuple[str, str], dict]:
    return {(r["queue"], r["resource"]): r for r in results if r["flavor"] == "a100-80g"}


def test_proposal_and_evidence(history):
    body = api(history.admin).get(f"/api/v1/recommendations?days={DAYS}").json()
    rows = by_key(body["results"])
    rd, vision, nlp = rows[("rd", "gpu")], rows[("rd/vision", "gpu")], rows[("rd/nlp", "gpu")]
    # The department first, from its subtree's demand (22 an hour, 30 in the two hours the
    # 8-GPU job waited): min 22, max 22 (p95), within the fleet's 64 A100s.
    assert (rd["min"], rd["max"], rd["shared_capacity"]) == (22, 22, 64.0)
    assert rd["parent"] is None and rd["evidence"]["demand_percentiles"]["99"] == 30
    # Its children within its proposal: medians 20 and 2 add up to 22, not scaled.
    assert (vision["min"], nlp["min"]) == (20, 2) and vision["shared_capacity"] == 22
    assert not vision["evidence"]["scaled_to_fit"]
    assert vision["parent"] == "rd" and vision["parent_proposal"] == {
        "min": 22, "max": 22, "changes": True}
    # p95 of 72 hours: 20 (the two hours with the waiting job, 28, are the top 3%).
    assert (vision["max"], nlp["max"]) == (20, 2)
    ev = vision["evidence"]
    assert ev["hours"] == 72 and ev["pending_gpu_hours"] == pytest.approx(16, abs=0.1)
    assert ev["borrowed_gpu_hours"] == 12 * 72 and ev["demand_percentiles"]["99"] == 28
    # nlp left 6 of its min unused each hour while vision borrowed 12: 6 lent each hour.
    assert nlp["evidence"]["lent_gpu_hours"] == 6 * 72
    assert len(ev["by_hour"]) == 24 and len(ev["by_weekday"]) == 7
    # Every resource with history, at every level: cores and memory too (8 cores and 64 GiB
    # each hour each, plus the waiting job's 8 cores and 64 GiB), though no queue sets them.
    cpu = rows[("rd/vision", "cpu")]
    assert (cpu["min"], cpu["max"], cpu["unit"], cpu["accounted"]) == (8, 8, "core", False)
    assert (rows[("rd", "cpu")]["min"], rows[("rd", "memory")]["min"]) == (16, 128)
    assert rows[("rd/nlp", "memory")]["min"] == 64 and rows[("rd", "cpu")]["shared_capacity"] \
        == 2 * 4 * 96
    # The whole proposal keeps the tree's rules (children's min within the parent's, ...).
    assert body["tree_problems"] == []
    # A lead sees the queues of their subtree only; a researcher nothing.
    lead = api(history.bob).get(f"/api/v1/recommendations?days={DAYS}").json()
    assert {r["queue"] for r in lead["results"]} == {"rd/vision"}
    assert by_key(lead["results"])[("rd/vision", "gpu")]["min"] == 20
    assert api(history.alice).get("/api/v1/recommendations").status_code == 403


def test_a_department_bounds_its_children(history):
    # Three 8-GPU nodes of A100s in all: the department gets at most 24, and its children's
    # medians (20 and 2, 22 in all) fit; at 16 they are scaled to 15 and 1.
    from scheduling.models import Node

    Node.objects.exclude(name__in=["bj-a100-0", "bj-a100-1"]).update(ready=False)
    rows = by_key(api(history.admin).get(f"/api/v1/recommendations?days={DAYS}").json()[
        "results"])
    rd, vision, nlp = rows[("rd", "gpu")], rows[("rd/vision", "gpu")], rows[("rd/nlp", "gpu")]
    assert (rd["min"], rd["max"]) == (16, 16) and rd["evidence"]["scaled_to_fit"]
    assert (vision["min"], nlp["min"]) == (15, 1) and vision["evidence"]["unscaled_min"] == 20
    assert vision["max"] <= rd["max"] and nlp["max"] <= rd["max"]


def test_extended_resources_with_history(history):
    # A MIG flavor's node advertises 7 1g slices; a job asked 3 of them and waited all day.
    from quotas.models import Flavor
    from scheduling.models import Node

    mig = Flavor.objects.create(name="a100-mig", gpu_memory_gib=80)
    Node.objects.create(cluster=history.bj, name="bj-mig-0", flavor=mig, gpus=0,
                        cpu=Decimal(64), memory_gib=Decimal(512),
                        resources={"nvidia.com/mig-1g.10gb": 7000})
    w = submit(history, "sliced", gpus=0, pods=[{
        "count": 1, "flavors": ["a100-mig"], "gpus": 0, "cpu": 2, "memory_gib": 8,
        "resources": {"nvidia.com/mig-1g.10gb": 3}}])
    Workload.objects.filter(pk=w.pk).update(
        submitted_at=hour_floor(timezone.now()) - timedelta(hours=DAYS * 24))
    body = api(history.admin).get(f"/api/v1/recommendations?days={DAYS}").json()
    rows = {(r["queue"], r["flavor"], r["resource"]): r for r in body["results"]}
    slices = rows[("rd/vision", "a100-mig", "nvidia.com/mig-1g.10gb")]
    assert (slices["min"], slices["max"], slices["unit"]) == (3, 3, "slice")
    assert rows[("rd", "a100-mig", "nvidia.com/mig-1g.10gb")]["shared_capacity"] == 7
    # Filed as a capacity request for that key.
    r = api(history.bob).post("/api/v1/recommendations/file", {
        "queue": "rd/vision", "flavor": "a100-mig", "resource": "nvidia.com/mig-1g.10gb",
        "days": DAYS}, format="json")
    assert r.status_code == 201, r.json()
    req = CapacityRequest.objects.get()
    assert (req.resource, req.min, req.max) == ("nvidia.com/mig-1g.10gb", 3, 3)
    assert "a100-mig/nvidia.com/mig-1g.10gb" in req.justification


def test_bad_options_name_the_field(history):
    r = api(history.admin).get("/api/v1/recommendations?days=120&max_percentile=x")
    assert r.status_code == 400
    assert r.json() == {"days": ["120 is not between 1 and 90"],
                        "max_percentile": ["'x' is not a number"]}
    r = api(history.admin).get("/api/v1/recommendations?min_percentile=90&max_percentile=50")
    assert r.status_code == 400 and "50 < min_percentile 90" in r.json()["max_percentile"][0]


def test_file_as_capacity_request(history):
    r = api(history.bob).post("/api/v1/recommendations/file",
                              {"queue": "rd/vision", "flavor": "a100-80g", "days": DAYS},
                              format="json")
    assert r.status_code == 201, r.json()
    req = CapacityRequest.objects.get()
    assert (req.min, req.max, req.state) == (Decimal(20), Decimal(20), "submitted")
    assert req.requested_by == history.bob and req.resource == "gpu"
    assert "3 days of usage history" in req.justification
    assert "borrowed 864.0 GPU-hours" in req.justification
    assert "Consistent with the proposal for rd (min 22, max 22)" in req.justification
    r = api(history.bob).post("/api/v1/recommendations/file",
                              {"queue": "rd/vision", "flavor": "a100-80g", "resource": "cpu",
                               "days": DAYS}, format="json")
    assert r.status_code == 201, r.json()
    req = CapacityRequest.objects.get(resource="cpu")
    assert (req.min, req.max) == (Decimal(8), Decimal(8)) and "core-hours" in req.justification
    CapacityRequest.objects.filter(resource="cpu").delete()
    r = api(history.bob).post("/api/v1/recommendations/file",
                              {"queue": "rd/nlp", "flavor": "a100-80g", "days": DAYS},
                              format="json")
    assert r.status_code == 400 and "no recommendation for 'rd/nlp'" in r.json()["queue"][0]
    # A department is the admins' to plan for.
    r = api(history.bob).post("/api/v1/recommendations/file",
                              {"queue": "rd", "flavor": "a100-80g", "days": DAYS},
                              format="json")
    assert r.status_code == 400 and "no recommendation for 'rd'" in r.json()["queue"][0]
    assert CapacityRequest.objects.count() == 1


def test_replay_over_the_history_and_the_page(history, client):
    client.force_login(history.admin)
    page = client.get(f"/planner/recommendations/?days={DAYS}").content.decode()
    assert 'id="recommendations"' in page and 'id="replay-recommendations"' in page
    assert 'id="chart-profile-0-data"' in page and "rd/vision" in page
    r = client.post("/planner/recommendations/replay/", {"days": DAYS})
    run = TraceReplay.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/planner/replay/{run.pk}/"
    assert run.kind == "history" and run.workloads == 1
    changed = {(c["queue"], c["min"], c["max"]) for c in run.changes["quotas"]
               if c["resource"] == "gpu"}
    assert changed == {("rd", 22, 22), ("rd/vision", 20, 20), ("rd/nlp", 2, 2)}
    assert {c["resource"] for c in run.changes["quotas"]} == {"gpu", "cpu", "memory"}
    trace_replay_run(replay_id=run.pk)
    run.refresh_from_db()
    assert run.state == "done" and run.result["proposed"]["queues"]["rd/vision"]["admitted"] == 1
    r = client.post("/planner/recommendations/file/", {"queue": "rd/vision",
                                                       "flavor": "a100-80g", "days": DAYS})
    req = CapacityRequest.objects.get()
    assert r.status_code == 302 and r["Location"].endswith(f"/{req.pk}/")
    r = client.post("/planner/recommendations/file/", {"queue": "rd/vision",
                                                       "flavor": "a100-80g", "days": "0"})
    assert r.status_code == 400 and "0 is not between 1 and 90" in r.content.decode()
