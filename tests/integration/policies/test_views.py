"""Admin pages: list, create with refused CEL, edit as a new version, live validation,
"try it", replay, violations; researchers are kept out; query budget of the list."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from policies.models import Policy, PolicyViolation
from policies.services import policy_create

from .conftest import NOW

CAP = {"name": "gpu-cap", "kind": "validate", "mode": "audit", "rule": "request.gpus <= 16",
       "message": '"asked for " + string(request.gpus) + " GPUs, at most 16"'}


@pytest.fixture
def admin_client(org):
    client = Client()
    client.force_login(org.admin)
    return client


def form(**override):
    data = {"name": "gpu-cap", "description": "", "kind": "validate", "mode": "audit",
            "scope": "", "order": "100", "key": "", "match": "true",
            "rule": "request.gpus <= 16", "message": '"asked for " + string(request.gpus)',
            "comment": ""}
    data.update(override)
    return data


def test_researchers_get_403(org):
    client = Client()
    client.force_login(org.alice)
    assert client.get("/policies/").status_code == 403
    assert client.get("/policies/violations/").status_code == 403


def test_list_shows_mode_hits_denials_and_last_change(admin_client, org):
    for i in range(5):
        policy_create(user=org.admin, data={**CAP, "name": f"cap-{i}"})
    Policy.objects.filter(name="cap-0").update(hits=12, denials=3, mode="enforce")
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get("/policies/")
    assert page.status_code == 200
    # (+2 on a client's first page: the user's time zone and unread notifications, then cached)
    assert len(queries) <= 8, [q["sql"] for q in queries]
    html = page.content.decode()
    assert "cap-0" in html and ">12<" in html and ">3<" in html and "v1 ·" in html
    assert "root" in html and "enforce" in html


def test_create_refuses_bad_cel_with_position_then_saves(admin_client):
    page = admin_client.post("/policies/new/", form(rule="request.gpus <="))
    assert page.status_code == 200
    assert "line 1, column 16: Syntax error" in page.content.decode()
    assert not Policy.objects.exists()
    response = admin_client.post("/policies/new/", form())
    assert response.status_code == 302 and response["Location"] == "/policies/gpu-cap/"
    assert Policy.objects.get().version == 1


def test_edit_saves_a_new_version_and_shows_the_diff(admin_client, org):
    policy_create(user=org.admin, data=CAP)
    response = admin_client.post("/policies/gpu-cap/", form(rule="request.gpus <= 32",
                                                             mode="enforce", comment="more"))
    assert response.status_code == 302
    policy = Policy.objects.get()
    assert (policy.version, policy.mode, policy.rule) == (2, "enforce", "request.gpus <= 32")
    html = admin_client.get("/policies/gpu-cap/").content.decode()
    assert "+rule: request.gpus &lt;= 32" in html and "v2 ·" in html and "more" in html


def test_live_validation_partial(admin_client):
    bad = admin_client.post("/policies/validate/", form(match="reqest.gpus > 1"),
                            HTTP_HX_REQUEST="true").content.decode()
    assert "unknown variable &#x27;reqest&#x27;" in bad and "line 1, column 1" in bad
    good = admin_client.post("/policies/validate/", form()).content.decode()
    assert "Valid CEL" in good


def test_try_box_uses_the_typed_policy(admin_client, org):
    policy_create(user=org.admin, data=CAP)
    data = form(rule="request.gpus <= 4", sample="request: {gpus: 8}")
    html = admin_client.post("/policies/gpu-cap/try/", data).content.decode()
    assert "deny" in html and "asked for 8" in html
    html = admin_client.post("/policies/try/", form(sample="request: [1")).content.decode()
    assert "not YAML" in html


def test_replay_partial(admin_client, org):
    policy_create(user=org.admin, data=CAP)
    from django.utils import timezone

    org.pending(org.team_a, 32, name="huge", at=timezone.now())
    html = admin_client.post("/policies/gpu-cap/replay/", form()).content.decode()
    assert "1 would have been denied" in html and "huge" in html


def test_violations_page_filters(admin_client, org):
    policy = policy_create(user=org.admin, data=CAP)
    PolicyViolation.objects.create(policy=policy, policy_version=1, mode="audit",
                                   outcome="audited", at=NOW, subject="sweep-1",
                                   message="asked for 32 GPUs")
    PolicyViolation.objects.create(policy=policy, policy_version=1, mode="audit",
                                   outcome="error", at=NOW, subject="sweep-2", message="boom")
    html = admin_client.get("/policies/violations/?outcome=audited").content.decode()
    assert "sweep-1" in html and "asked for 32 GPUs" in html and "sweep-2" not in html


def test_delete(admin_client, org):
    policy_create(user=org.admin, data=CAP)
    assert admin_client.post("/policies/gpu-cap/delete/").status_code == 302
    assert not Policy.objects.exists()


def test_new_and_edit_pages_render_with_htmx_hooks(admin_client, org):
    html = admin_client.get("/policies/new/").content.decode()
    assert 'hx-post="/policies/validate/"' in html and 'hx-post="/policies/try/"' in html
    assert "Try it on a sample request" in html and 'name="rule"' in html
    policy_create(user=org.admin, data=CAP)
    html = admin_client.get("/policies/gpu-cap/").content.decode()
    assert 'hx-post="/policies/gpu-cap/try/"' in html
    assert 'hx-post="/policies/gpu-cap/replay/"' in html
    assert "What would this have denied in the last 7 days?" in html
    assert "request.gpus &lt;= 16" in html and "v1 ·" in html


def test_order_out_of_range_is_a_form_error(admin_client):
    page = admin_client.post("/policies/new/", form(order=str(2**31)))
    assert "Ensure this value is less than or equal to 1000000." in page.content.decode()
    assert not Policy.objects.exists()
