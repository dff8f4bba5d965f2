"""POST /api/v1/workloads/preview: the request form's feedback for the API (verdicts, the cost
estimate counting fractions and MIG slices, the forecast), nothing saved; bad input is a 400
naming the field."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.services import rate_card_create
from quotas.models import Flavor
from scheduling.models import Node, Workload

pytestmark = pytest.mark.django_db

MIG = "nvidia.com/mig-1g.10gb"


def body(**pod):
    return {"name": "probe", "queue": "rd/vision", "priority_class": "training",
            "duration_hint_s": 7200,
            "pods": [{"count": 2, "flavors": ["a100-80g"], "gpus": 0.25, "cpu": 4,
                      "memory_gib": 16, **pod}]}


def test_the_preview_prices_fractions_and_slices_and_saves_nothing(clients):
    Node.objects.filter(name__in=["bj-a100-0", "bj-a100-1"]).update(resources={MIG: 7000})
    rate_card_create(flavor=Flavor.objects.get(name="a100-80g"), resource="gpu",
                     rate=Decimal("2.00"), effective_from=timezone.now() - timedelta(days=1))
    r = clients["researcher"].post("/api/v1/workloads/preview", body(resources={MIG: 7}),
                                   format="json")
    assert r.status_code == 200, r.content
    out = r.json()
    assert out["gpus"] == "0.5" and out["flavor"] == "a100-80g"
    assert out["flavors"] == [{"flavor": "a100-80g", "possible": True, "reasons": []}]
    # 2 x (0.25 + 7 x 1/7) = 2.5 cards at 2.00/h; 2 h hinted.
    assert (out["gpus_billed"], out["cost_per_hour"], out["cost_total"], out["currency"]) == (
        "2.5", "5.00", "10.00", "EUR")
    assert not Workload.objects.exists()


def test_a_preview_that_can_never_fit_names_the_reason(clients):
    r = clients["researcher"].post("/api/v1/workloads/preview",
                                   body(resources={"nvidia.com/mig-3g.40gb": 1}), format="json")
    assert r.status_code == 200
    (verdict,) = r.json()["flavors"]
    assert verdict["possible"] is False and verdict["reasons"][0]["code"] == "FLAVOR_UNAVAILABLE"
    assert "nvidia.com/mig-3g.40gb" in verdict["reasons"][0]["message"]
    assert r.json()["cost_per_hour"] is None  # no model it can run on: nothing to price


def test_bad_input_is_a_400_naming_the_field(clients):
    r = clients["researcher"].post("/api/v1/workloads/preview",
                                   body(resources={MIG: "4Q"}), format="json")
    assert r.status_code == 400
    assert f"pods[0].resources[{MIG}]" in r.content.decode()
    assert "is not a Kubernetes quantity" in r.content.decode()
    r = clients["anonymous"].post("/api/v1/workloads/preview", body(), format="json")
    assert r.status_code in (401, 403)
