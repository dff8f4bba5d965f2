"""Open resources in the API (QUOTA-SEMANTICS.md §10): quota cells in Kubernetes quantities,
extended-resource keys, units and exact quantities in the answer, bad quantities as 400s
naming the cell, flavors' GPU-equivalents."""

import pytest

from quotas.models import QuotaEntry

pytestmark = pytest.mark.django_db

MIG = "nvidia.com/mig-1g.10gb"


def test_quota_cells_take_quantities_and_answer_units(clients):
    admin = clients["admin"]
    r = admin.patch("/api/v1/queues/rd", {"quota": {"a100-80g": {
        "memory": {"min": "4G"}, "cpu": {"min": "500m", "max": 2},
        MIG: {"min": 7, "max": "14"},
    }}}, format="json")
    assert r.status_code == 200, r.content
    cells = r.json()["quota"]["a100-80g"]
    assert cells["memory"]["unit"] == "GiB"
    assert cells["memory"]["quantities"] == {"min": "4G", "max": None, "lendable": "4G"}
    assert cells["memory"]["min"] == 3.725
    assert cells["cpu"]["quantities"] == {"min": "500m", "max": "2", "lendable": "500m"}
    assert cells["cpu"]["unit"] == "cores"
    assert cells[MIG]["unit"] == "" and cells[MIG]["min"] == 7.0
    memory = QuotaEntry.objects.get(queue__path="rd", resource="memory")
    assert memory.min_base == 4_000_000_000


@pytest.mark.parametrize(("cell", "field", "message"), [
    ({"memory": {"min": "4Q"}}, "quota.a100-80g.memory.min",
     "'4Q' is not a Kubernetes quantity"),
    ({"memory": {"min": 0.1}}, "quota.a100-80g.memory.min",
     "0.1 is not a whole number of bytes"),
    ({"cpu": {"max": "1m5"}}, "quota.a100-80g.cpu.max", "is not a Kubernetes quantity"),
    ({"gpu": {"min": "1.5"}}, "quota.a100-80g.gpu.min", "GPUs are whole cards"),
])
def test_bad_quantities_are_400s_naming_the_cell(clients, cell, field, message):
    before = list(QuotaEntry.objects.values_list("resource", "min_base"))
    r = clients["admin"].patch("/api/v1/queues/rd/vision", {"quota": {"a100-80g": cell}},
                               format="json")
    assert r.status_code == 400
    assert any(message in m for m in r.json()[field]), r.json()
    assert list(QuotaEntry.objects.values_list("resource", "min_base")) == before


def test_flavor_gpu_equivalents(clients):
    admin = clients["admin"]
    r = admin.post("/api/v1/flavors", {"name": "a100-mig", "gpu_memory_gib": 80,
                                       "gpu_equivalents": {"nvidia.com/mig-3g.40gb": 0.5}},
                   format="json")
    assert r.status_code == 201, r.content
    assert r.json()["gpu_equivalents"] == {"nvidia.com/mig-3g.40gb": 0.5}
    r = admin.patch("/api/v1/flavors/a100-mig", {"gpu_equivalents": {"bad name": 1}},
                    format="json")
    assert r.status_code == 400
    assert "'bad name' is not a Kubernetes resource name" in str(r.json())
