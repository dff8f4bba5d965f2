"""GET /api/v1/history: filters, pagination, who may read what, bad input."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.history import Source, history_context
from policies.models import Policy
from quotas.models import QuotaEntry
from quotas.services import flavor_update, quota_set
from tests.integration.history.conftest import api_for, history

pytestmark = pytest.mark.django_db


@pytest.fixture
def edits(org):
    """vision's min 8 -> 10 by alice's lead bob over the API (as an admin would), nlp's
    min 4 -> 6 by root on a page, the flavor's notes by root in the admin."""
    with history_context(Source.API, user=org.bob):
        quota_set(queue=org.vision, flavor="a100-80g", resource="gpu", min=10)
    with history_context(Source.PAGE, user=org.admin):
        quota_set(queue=org.nlp, flavor="a100-80g", resource="gpu", min=6)
    with history_context(Source.ADMIN, user=org.admin):
        flavor_update(flavor=org.a100, notes="SXM4")
    return org


def objects(body) -> list[str]:
    return [e["object"] for e in body["results"]]


def test_lists_newest_first_with_the_page_shape(edits):
    body = history(api_for(edits.admin))
    assert set(body) == {"count", "next", "previous", "results"}
    first = body["results"][0]
    assert set(first) == {"type", "object", "object_label", "url", "history_id", "at", "user",
                          "source", "action", "reason", "changes", "before_known"}
    assert (first["type"], first["source"], first["user"]) == ("flavor", "admin", "root")
    assert first["changes"] == [{"field": "notes", "label": "notes", "before": "",
                                 "after": "SXM4", "before_text": "(empty)",
                                 "after_text": "SXM4"}]
    dates = [e["at"] for e in body["results"]]
    assert dates == sorted(dates, reverse=True)


def test_filters_by_object_type_user_source_and_dates(edits):
    api = api_for(edits.admin)
    vision, nlp = f"quota:{edits.vision_entry.pk}", f"quota:{edits.nlp_entry.pk}"
    assert objects(history(api, object=f"queue:{edits.vision.pk}", source="api")) == [vision]
    assert objects(history(api, user="bob")) == [vision]
    assert objects(history(api, source="page")) == [nlp]
    assert objects(history(api, type="flavor", source="admin")) == [f"flavor:{edits.a100.pk}"]
    both = history(api, type=["quota", "flavor"], user="root")
    assert objects(both) == [f"flavor:{edits.a100.pk}", nlp]
    # Dates: move bob's change back two days; a date `until` includes that whole day.
    QuotaEntry.history.filter(history_user=edits.bob).update(
        history_date=timezone.now() - timedelta(days=2))
    day = (timezone.now() - timedelta(days=2)).date().isoformat()
    assert objects(history(api, user="bob", until=day)) == [vision]
    assert objects(history(api, user="bob", since=timezone.now().date().isoformat())) == []
    assert objects(history(api, until=day, since=day)) == [vision]
    moment = (timezone.now() - timedelta(hours=1)).isoformat()
    assert set(objects(history(api, since=moment, user="root"))) == {
        nlp, f"flavor:{edits.a100.pk}"}
    assert objects(history(api, until=moment, user="root")) == []


def test_paginated_like_the_other_lists(edits):
    for i in range(55):
        with history_context(Source.API, user=edits.admin):
            flavor_update(flavor=edits.a100, notes=f"n{i}")
    api = api_for(edits.admin)
    body = history(api, type="flavor")
    assert body["count"] == 56 + 1  # 56 edits and its creation
    assert len(body["results"]) == 50 and body["next"].endswith("page=2&type=flavor")
    assert len(history(api, type="flavor", page=2)["results"]) == 7
    assert api.get("/api/v1/history", {"page": 9}).status_code == 404


@pytest.mark.parametrize(("params", "field"), [
    ({"since": "yesterday"}, "since"),
    ({"until": "2026-13-40"}, "until"),
    ({"object": "queue:abc"}, "object"),
    ({"object": "workload:3"}, "object"),
    ({"object": "12"}, "object"),
    ({"type": "workload"}, "type"),
    ({"source": "cli"}, "source"),
    ({"since": "2026-12-02", "until": "2026-12-01"}, "until"),
    ({"until": "9999-12-31"}, "until"),
    ({"object": "queue:\u00b2"}, "object"),
])
def test_bad_filters_are_400_naming_the_field(org, params, field):
    r = api_for(org.admin).get("/api/v1/history", params)
    assert r.status_code == 400
    body = r.json()
    assert list(body) == [field] and body[field][0]


def test_anonymous_callers_get_401(org):
    assert APIClient().get("/api/v1/history").status_code in (401, 403)


def test_a_researcher_cannot_read_the_history_of_queues_they_cannot_see(edits):
    alice = api_for(edits.alice)  # researcher in vision
    assert history(alice, object=f"queue:{edits.nlp.pk}")["count"] == 0
    assert history(alice, object=f"quota:{edits.nlp_entry.pk}")["count"] == 0
    seen = objects(history(alice))
    assert f"quota:{edits.nlp_entry.pk}" not in seen
    assert f"queue:{edits.nlp.pk}" not in seen and f"queue:{edits.rd.pk}" not in seen
    assert f"quota:{edits.vision_entry.pk}" in seen and f"queue:{edits.vision.pk}" in seen
    # The fleet and flavors are everyone's to read, as their pages are.
    assert f"flavor:{edits.a100.pk}" in seen
    carol = api_for(edits.carol)  # researcher in nlp
    assert f"quota:{edits.vision_entry.pk}" not in objects(history(carol))
    assert history(carol, object=f"queue:{edits.nlp.pk}", source="page")["count"] == 1


def test_a_lead_sees_the_subtree_they_decide_for_and_no_other(edits):
    deeper = quota_deeper(edits)
    bob = api_for(edits.bob)  # lead of vision
    seen = objects(history(bob, type="queue"))
    assert f"queue:{deeper.pk}" in seen and f"queue:{edits.vision.pk}" in seen
    assert f"queue:{edits.nlp.pk}" not in seen


def quota_deeper(org):
    from quotas.services import queue_create

    return queue_create(name="det", parent=org.vision).queue


def test_policies_history_is_for_admins(org):
    admin = api_for(org.admin)
    r = admin.post("/api/v1/policies", {"name": "cap", "kind": "validate",
                                        "rule": "request.gpus <= 64"}, format="json")
    assert r.status_code == 201, r.content
    assert history(admin, type="policy")["count"] == 1
    assert history(api_for(org.bob), type="policy")["count"] == 0
    policy = Policy.objects.get(name="cap")
    assert history(admin, object=f"policy:{policy.pk}")["count"] == 1
    assert history(api_for(org.alice), object=f"policy:{policy.pk}")["count"] == 0


def test_budgets_history_follows_the_costs_page(org):
    from billing.models import TeamCostCenter
    from billing.services import budget_create
    from billing.services.rates import cost_center_create

    mine = cost_center_create(code="cv", name="Vision")
    other = cost_center_create(code="nl", name="NLP")
    TeamCostCenter.objects.create(team=org.vision_team, cost_center=mine)
    TeamCostCenter.objects.create(team=org.nlp_team, cost_center=other)
    with history_context(Source.API, user=org.admin):
        b1 = budget_create(cost_center=mine, amount=Decimal(1000))
        b2 = budget_create(cost_center=other, amount=Decimal(2000))
    alice = api_for(org.alice)
    seen = objects(history(alice, type=["budget", "threshold"]))
    assert f"budget:{b1.pk}" in seen and f"budget:{b2.pk}" not in seen
    assert len(seen) == 4  # the budget and its three thresholds
    entry = history(alice, object=f"budget:{b1.pk}", type="budget")["results"][0]
    assert entry["object_label"] == "cv monthly"
    assert {c["field"]: c["after_text"] for c in entry["changes"]}["amount"] == "1,000.00 EUR"


def test_the_schema_documents_the_endpoint_and_its_filters(client, org):
    client.force_login(org.admin)
    schema = client.get("/api/schema/").content.decode()
    assert "/api/v1/history:" in schema
    for name in ("object", "type", "user", "source", "since", "until", "page"):
        assert f"name: {name}" in schema
    assert "PaginatedHistoryEntryOutputList" in schema
