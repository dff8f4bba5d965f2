"""The approval inbox API (portal/pages/api.py): what waits for the user's decision, and no
decision on a foreign or a not held workload. The rule, approve and deny themselves are tested
in tests/integration/scheduling/request/test_approvals.py."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.capacity.services import capacity_request_submit
from scheduling.models import Workload
from tests.integration.portal.conftest import api_for, held, submit

pytestmark = pytest.mark.django_db


def test_inbox_lists_what_the_user_decides(org, priority_classes):
    w = held(org.alice, name="long")
    capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100, resource="gpu",
                            min=12, max=None, justification="x")
    data = api_for(org.bob).get("/api/v1/approvals").json()
    assert [r["id"] for r in data["workloads"]] == [w.pk]
    assert data["workloads"][0]["gpus"] == 4 and data["workloads"][0]["owner"] == "alice"
    assert [r["queue"] for r in data["capacity_requests"]] == ["rd/vision"]
    carol = api_for(org.carol).get("/api/v1/approvals").json()
    assert carol == {"capacity_requests": [], "workloads": []}


def test_foreign_and_not_held_are_404(org, priority_classes):
    w = held(org.alice, name="long")
    free = submit(org.alice, name="free")
    carol = api_for(org.carol)
    assert carol.post(f"/api/v1/workloads/{w.pk}/approve", {}, format="json").status_code == 404
    admin = api_for(org.admin)
    assert admin.post(f"/api/v1/workloads/{free.pk}/approve", {},
                      format="json").status_code == 404
    assert Workload.objects.get(pk=w.pk).needs_approval is True


def test_inbox_query_budget(org, priority_classes):
    for i in range(20):
        held(org.alice, name=f"w{i}")
        capacity_request_submit(user=org.alice, queue=org.vision, flavor=org.a100,
                                resource="gpu", min=9 + i, max=None, justification="x")
    admin = api_for(org.admin)
    with CaptureQueriesContext(connection) as ctx:
        data = admin.get("/api/v1/approvals").json()
    assert len(data["workloads"]) == 20 and len(data["capacity_requests"]) == 20
    assert len(ctx.captured_queries) <= 8, [q["sql"] for q in ctx.captured_queries]
