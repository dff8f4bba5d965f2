"""Queues API: nested tree, can_submit, admin writes, tree rules as 400s, permission matrix."""

import pytest

from quotas.models import Queue, QuotaEntry

pytestmark = pytest.mark.django_db


def snapshot():
    return (
        sorted(Queue.objects.values_list("path", "namespace", "strategy")),
        sorted(QuotaEntry.objects.values_list("queue__path", "flavor__name", "resource",
                                              "min", "max", "lendable")),
    )


def test_tree_nested_with_quota_and_usage(clients):
    response = clients["researcher"].get("/api/v1/queues")
    assert response.status_code == 200
    [rd] = response.json()
    assert rd["path"] == "rd" and rd["is_leaf"] is False and rd["can_submit"] is False
    assert rd["quota"]["a100-80g"]["gpu"] == {
        "min": 16.0, "max": 32.0, "lendable": 8.0, "set": True,
        "used": 0.0, "borrowed": 0.0, "lent": 0.0, "pending": 0.0,
        "unit": "GPUs", "quantities": {"min": "16", "max": "32", "lendable": "8"},
    }
    # Researchers see their teams' queues (and the ancestors), not other teams'.
    [vision] = rd["children"]
    assert vision["path"] == "rd/vision"
    assert vision["namespace"] == "rd-vision" and vision["children"] == []
    assert vision["quota"]["a100-80g"]["gpu"]["max"] == 32.0  # inherited
    assert vision["can_submit"] is True  # alice's team


def test_lead_sees_own_leaf_submittable(clients):
    [rd] = clients["lead"].get("/api/v1/queues").json()
    flags = {c["path"]: c["can_submit"] for c in rd["children"]}
    assert flags == {"rd/nlp": True}


def test_admin_sees_every_queue(clients):
    [rd] = clients["admin"].get("/api/v1/queues").json()
    assert {c["path"] for c in rd["children"]} == {"rd/vision", "rd/nlp"}
    assert clients["admin"].get("/api/v1/queues/rd/nlp").status_code == 200


def test_other_teams_queue_is_404_and_hidden_below_ancestors(clients):
    response = clients["researcher"].get("/api/v1/queues/rd/nlp")
    assert response.status_code == 404
    assert response.json() == {"detail": "No queue at path 'rd/nlp'."}
    # The ancestor is visible, but only with the researcher's own part below it.
    rd = clients["researcher"].get("/api/v1/queues/rd").json()
    assert [c["path"] for c in rd["children"]] == ["rd/vision"]


def test_detail_by_path_with_slashes(clients):
    response = clients["researcher"].get("/api/v1/queues/rd/vision")
    assert response.status_code == 200
    assert response.json()["path"] == "rd/vision"
    assert response.json()["quota"]["a100-80g"]["gpu"]["min"] == 8.0
    response = clients["researcher"].get("/api/v1/queues/rd/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "No queue at path 'rd/nope'."}


@pytest.mark.parametrize(
    "role,read,write",
    [("anonymous", 401, 401), ("researcher", 200, 403), ("lead", 200, 403), ("admin", 200, 201)],
)
def test_permission_matrix(clients, role, read, write):
    client = clients[role]
    assert client.get("/api/v1/queues").status_code == read
    assert client.get("/api/v1/queues/rd").status_code == read
    response = client.post("/api/v1/queues", {"parent": "rd", "name": "audio"}, format="json")
    assert response.status_code == write
    if write == 403:
        assert response.json() == {
            "detail": "Only platform admins may change this; members can read it."
        }
        assert not Queue.objects.filter(path="rd/audio").exists()
    if write == 401:
        assert response.json()["detail"] == "Authentication credentials were not provided."
    for method in ("patch", "delete"):
        response = getattr(client, method)("/api/v1/queues/rd/nlp", {"description": "x"},
                                           format="json")
        assert response.status_code == {201: 200}.get(write, write)
    if role != "admin":
        assert Queue.objects.filter(path="rd/nlp", description="").exists()


def test_admin_create_returns_queue_and_warnings(clients):
    response = clients["admin"].post("/api/v1/queues", {
        "parent": "rd", "name": "audio", "strategy": "spread",
        "quota": {"a100-80g": {"gpu": {"min": 4, "max": 8}}},
    }, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["path"] == "rd/audio" and body["namespace"] == "rd-audio"
    assert body["strategy"] == "spread"
    assert body["quota"]["a100-80g"]["gpu"]["lendable"] == 4.0
    assert body["warnings"] == []


def test_admin_break_v2_is_400_and_nothing_saved(clients):
    before = snapshot()
    response = clients["admin"].post("/api/v1/queues", {
        "parent": "rd", "name": "audio", "quota": {"a100-80g": {"gpu": {"min": 5}}},
    }, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["rd: a100-80g/gpu: children's min 17 > min 16"]
    assert snapshot() == before


@pytest.mark.parametrize("cell,message", [
    ({"min": 8, "lendable": 9}, "rd/vision: a100-80g/gpu: lendable 9 > min 8"),
    ({"min": 8, "max": 7}, "rd/vision: a100-80g/gpu: min 8 > max 7"),
    ({"min": -1}, "rd/vision: a100-80g/gpu: min -1 < 0"),
    ({"min": 8, "max": 33}, "rd/vision: a100-80g/gpu: max 33 > parent rd max 32"),
    ({"min": 13}, "rd: a100-80g/gpu: children's min 17 > min 16"),
])
def test_admin_patch_rules_400(clients, cell, message):
    before = snapshot()
    response = clients["admin"].patch(
        "/api/v1/queues/rd/vision", {"quota": {"a100-80g": {"gpu": cell}}}, format="json"
    )
    assert response.status_code == 400
    assert message in response.json()["errors"]
    assert message in response.json()["detail"]
    assert snapshot() == before


def test_patch_v4_exclusive(clients):
    clients["admin"].patch("/api/v1/queues/rd/vision",
                           {"quota": {"a100-80g": {"gpu": {"min": 8, "lendable": 0}}}},
                           format="json")
    response = clients["admin"].patch(
        "/api/v1/queues/rd/nlp", {"quota": {"a100-80g": {"gpu": {"min": 4, "lendable": 3}}}},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        "rd: a100-80g/gpu: children's exclusive 9 > exclusive 8 (min 16 - lendable 8)"
    ]


def test_unknown_flavor_parent_and_cycle(clients):
    admin = clients["admin"]
    response = admin.post("/api/v1/queues", {"name": "x", "quota": {"t4": {"gpu": {"min": 1}}}},
                          format="json")
    assert response.status_code == 400 and response.json()["errors"] == ["x: unknown flavor 't4'"]
    response = admin.post("/api/v1/queues", {"name": "x", "parent": "zz"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"parent": ["No queue at path 'zz'."]}
    response = admin.patch("/api/v1/queues/rd", {"parent": "rd/vision"}, format="json")
    assert response.status_code == 400
    assert "parent cycle" in response.json()["detail"]
    response = admin.post("/api/v1/queues", {"name": "vision", "parent": "rd"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["rd/vision: a queue with this path already exists"]
    assert not Queue.objects.filter(path="x").exists()


def test_patch_clear_key_and_rename(clients):
    admin = clients["admin"]
    response = admin.patch("/api/v1/queues/rd/nlp",
                           {"name": "language", "quota": {"a100-80g": {"gpu": None}}},
                           format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["path"] == "rd/language"
    assert response.json()["quota"]["a100-80g"]["gpu"]["set"] is False
    assert not QuotaEntry.objects.filter(queue__path="rd/language").exists()


def test_delete(clients):
    admin = clients["admin"]
    response = admin.delete("/api/v1/queues/rd")
    assert response.status_code == 400
    assert "has 2 child queue(s)" in response.json()["detail"]
    response = admin.delete("/api/v1/queues/rd/nlp")
    assert response.status_code == 200 and response.json()["deleted"] == "rd/nlp"
    assert not Queue.objects.filter(path="rd/nlp").exists()
    assert admin.delete("/api/v1/queues/rd/nlp").status_code == 404


def test_queue_list_query_budget(clients, org, django_assert_max_num_queries):
    from quotas.services import queue_create
    for i in range(20):
        queue_create(name=f"p{i}", parent=org["vision"] if i == 0 else Queue.objects.get(
            path="rd/vision/p0"))
    # Constant in the tree size (token, tree, quotas, usage, teams).
    with django_assert_max_num_queries(14):
        response = clients["researcher"].get("/api/v1/queues")
    assert response.status_code == 200


def test_depth_limit_and_warnings_through_api(clients, settings):
    settings.ALLOT_MAX_TREE_DEPTH = 3
    admin = clients["admin"]
    response = admin.post("/api/v1/queues", {"parent": "rd/vision", "name": "p"}, format="json")
    assert response.status_code == 201 and response.json()["warnings"] == []
    response = admin.post("/api/v1/queues", {"parent": "rd/vision/p", "name": "deep"},
                          format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["rd/vision/p/deep: depth 4 > limit 3"]
    # W1: both children capped below rd's min: saved, and the warning comes back.
    admin.patch("/api/v1/queues/rd/nlp", {"quota": {"a100-80g": {"gpu": {"min": 4, "max": 4}}}},
                format="json")
    response = admin.patch("/api/v1/queues/rd/vision",
                           {"quota": {"a100-80g": {"gpu": {"min": 8, "max": 8}}}}, format="json")
    assert response.status_code == 200
    assert response.json()["warnings"] == [
        "rd: a100-80g/gpu: children's max 12 < min 16: some capacity can never be used"
    ]
    assert QuotaEntry.objects.get(queue__path="rd/vision").max == 8


def test_w3_fleet_warning_through_api(clients):
    # The fixture fleet has 4 a100 nodes x 8 = 32 GPUs; rd holds min 16.
    response = clients["admin"].post("/api/v1/queues", {
        "name": "ops", "quota": {"a100-80g": {"gpu": {"min": 17}}},
    }, format="json")
    assert response.status_code == 201
    assert response.json()["warnings"] == [
        "(root): a100-80g/gpu: top-level min 33 > installed capacity 32: not every guarantee "
        "can be honoured"
    ]


def test_malformed_quota_body(clients):
    response = clients["admin"].post("/api/v1/queues", {
        "name": "x", "quota": {"a100-80g": {"gpu": {"min": "lots"}}},
    }, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "quota.a100-80g.gpu.min": ["'lots' is not a Kubernetes quantity (like 64, 500m, "
                                   "2048Gi)"]
    }
    assert not Queue.objects.filter(path="x").exists()
