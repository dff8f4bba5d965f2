"""Flavors (admin writes) and clusters (capacity, used, health per flavor; nodes)."""

import pytest

from quotas.models import Flavor

pytestmark = pytest.mark.django_db


def test_flavor_list_and_detail(clients):
    response = clients["researcher"].get("/api/v1/flavors")
    assert response.status_code == 200
    assert [f["name"] for f in response.json()] == ["a100-80g", "cpu"]
    response = clients["researcher"].get("/api/v1/flavors/a100-80g")
    assert response.json()["gpu_memory_gib"] == 80
    assert clients["researcher"].get("/api/v1/flavors/t4").status_code == 404


@pytest.mark.parametrize("role,code", [("anonymous", 401), ("researcher", 403), ("lead", 403),
                                       ("admin", 201)])
def test_flavor_create_permissions(clients, role, code):
    response = clients[role].post("/api/v1/flavors", {
        "name": "h100-80g", "gpu_memory_gib": 80, "node_selector": {"gpu": "h100"},
    }, format="json")
    assert response.status_code == code
    assert Flavor.objects.filter(name="h100-80g").exists() == (code == 201)


def test_flavor_bad_input_and_update(clients):
    admin = clients["admin"]
    response = admin.post("/api/v1/flavors", {"name": "a100-80g"}, format="json")
    assert response.status_code == 400
    assert response.json()["detail"] == "flavor 'a100-80g' already exists"
    response = admin.post("/api/v1/flavors", {"name": "H100"}, format="json")
    assert response.status_code == 400 and "DNS-1123" in response.json()["detail"]
    response = admin.post("/api/v1/flavors", {"name": "x", "gpu_memory_gib": 0}, format="json")
    assert response.status_code == 400
    assert "gpu_memory_gib" in response.json()
    response = admin.patch("/api/v1/flavors/a100-80g", {"notes": "SXM4"}, format="json")
    assert response.status_code == 200 and response.json()["notes"] == "SXM4"
    assert clients["lead"].patch("/api/v1/flavors/a100-80g", {"notes": "x"},
                                 format="json").status_code == 403


def test_flavor_node_selector_and_interconnect_are_kubernetes_labels(clients):
    admin = clients["admin"]
    response = admin.post("/api/v1/flavors", {
        "name": "h100", "node_selector": {"gpu\x00": "h100"}}, format="json")
    assert response.status_code == 400
    assert response.json() == {"detail": "NUL character (U+0000) in a key of node_selector "
                                         "('gpu\\x00'): text may not contain NUL"}
    response = admin.post("/api/v1/flavors", {
        "name": "h100", "node_selector": {"Example.com/gpu": "h100", "gpu": "h 100"},
        "interconnect_label": "rack name"}, format="json")
    assert response.status_code == 400
    assert response.json()["interconnect_label"] == [
        "label key 'rack name' is not a Kubernetes label key (an optional DNS subdomain prefix "
        "of at most 253 characters and '/', then a name of at most 63 letters, digits, '-', "
        "'_' or '.', beginning and ending with a letter or digit)"]
    assert response.json()["node_selector"] == [
        "label key 'Example.com/gpu': prefix 'Example.com' is not a DNS subdomain (an "
        "optional DNS subdomain prefix of at most 253 characters and '/', then a name of at "
        "most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or "
        "digit)",
        "label 'gpu': value 'h 100' is not a Kubernetes label value (empty, or at most 63 "
        "letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)"]
    response = admin.patch("/api/v1/flavors/a100-80g", {"interconnect_label": "rack name"},
                           format="json")
    assert response.status_code == 400 and "interconnect_label" in response.json()
    assert not Flavor.objects.filter(name="h100").exists()


def test_flavor_service_refuses_nul_in_a_selector_key(org):
    from django.core.exceptions import ValidationError

    from quotas.services import flavor_create

    with pytest.raises(ValidationError) as caught:
        flavor_create(name="h100", node_selector={"gpu\x00": "h100"})
    assert caught.value.message_dict == {
        "node_selector": ["label key 'gpu\\x00' contains a NUL character"]}


def test_clusters_capacity_per_flavor(clients):
    response = clients["researcher"].get("/api/v1/clusters")
    assert response.status_code == 200
    [bj] = response.json()
    assert bj["name"] == "bj" and bj["region"] == "beijing" and "nodes" not in bj
    a100 = bj["flavors"]["a100-80g"]
    assert a100["capacity"] == {"gpu": 32, "cpu": 256.0, "memory": 2048.0}
    assert a100["allocatable"]["gpu"] == 24  # one node not ready
    assert a100["used"] == {"gpu": 0, "cpu": 0.0, "memory": 0.0}
    assert (a100["nodes"], a100["ready_nodes"], a100["health"]) == (4, 3, 0.75)


def test_cluster_detail_with_nodes(clients):
    response = clients["researcher"].get("/api/v1/clusters/bj")
    assert response.status_code == 200
    nodes = response.json()["nodes"]
    assert [n["name"] for n in nodes] == [f"bj-a100-{i}" for i in range(4)]
    assert nodes[3]["ready"] is False and nodes[0]["gpus"] == 8
    assert clients["researcher"].get("/api/v1/clusters/nope").status_code == 404
    assert clients["anonymous"].get("/api/v1/clusters/bj").status_code == 401


def test_schema_and_docs_offline(clients, client, org):
    client.force_login(org["alice"])
    response = client.get("/api/schema/")
    assert response.status_code == 200
    text = response.content.decode()
    for route in ("/api/v1/queues/{path}", "/api/v1/clusters/{name}", "/api/v1/auth/token",
                  "/api/v1/flavors"):
        assert route in text
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()
