"""The request-GPUs pages (scheduling/views.py, workload_new and workload_check) with several
pod sets: add, remove, per-row errors, submission."""

import re

import pytest
from django.test import Client

from scheduling.models import Workload
from tests.factories import PASSWORD
from tests.integration.portal import conftest as portal_conftest
from tests.integration.portal.conftest import pod_rows

pytestmark = pytest.mark.django_db

# The portal tests' organisation and priority classes (tests/integration/portal/conftest.py).
org = portal_conftest.org
priority_classes = portal_conftest.priority_classes

BASE = {"queue": "rd/vision", "name": "ddp-run", "flavor_1": "a100-80g",
        "priority_class": "training", "preemptible": "on", "checkpoint": "on",
        "command": "torchrun train.py"}
LAUNCHER = {"count": 1, "gpus": 0, "cpu": 4, "memory_gib": 16}
WORKERS = {"count": 2, "gpus": 8, "cpu": 32, "memory_gib": 256, "gpu_memory_gib": 40}


@pytest.fixture
def alice(client, org, priority_classes):
    from quotas.models import TeamMembership, TeamRole
    from tests.factories import UserFactory

    user = UserFactory(username="alice-form")
    TeamMembership.objects.create(team=org.vision_team, user=user, role=TeamRole.RESEARCHER)
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_the_form_starts_with_one_pod_set(alice):
    html = alice.get("/workloads/new/").content.decode()
    assert 'name="pods-TOTAL_FORMS" value="1"' in html
    assert 'id="id_pods-0-count"' in html and 'id="id_pods-1-count"' not in html
    assert 'id="add-pod-set"' in html
    # One row only: no "Remove" box to untick the last pod set.
    assert 'id="id_pods-0-DELETE"' not in html


def test_the_form_says_what_the_expected_duration_does(alice):
    html = alice.get("/workloads/new/").content.decode()
    assert "Expected duration (hours)" in html
    assert "makes start estimates right" in html and "12-48% without" in html


def test_add_a_pod_set_keeps_what_was_typed(alice):
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(WORKERS), "add_pod_set": "1"})
    html = r.content.decode()
    assert r.status_code == 200 and not Workload.objects.exists()
    assert 'name="pods-TOTAL_FORMS" value="2"' in html
    assert 'name="pods-0-gpus" value="8"' in html  # as typed
    assert 'name="pods-1-gpus" value="1"' in html  # the new row's defaults
    assert 'value="ddp-run"' in html
    assert "This field is required" not in html  # nothing is validated yet
    # An unticked checkbox stays unticked.
    r = alice.post("/workloads/new/", {**{k: v for k, v in BASE.items() if k != "checkpoint"},
                                       **pod_rows(WORKERS), "add_pod_set": "1"})
    html = r.content.decode()
    assert re.search(r'<input type="checkbox" name="checkpoint"[^>]*checked', html) is None
    assert re.search(r'<input type="checkbox" name="preemptible"[^>]*checked', html)


def test_two_pod_sets_submitted_in_order(alice):
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(LAUNCHER, WORKERS)})
    w = Workload.objects.get(name="ddp-run")
    assert r.status_code == 302 and r["Location"] == f"/workloads/{w.pk}/"
    assert [(p.index, p.count, p.gpus, p.flavors, p.gpu_memory_gib)
            for p in w.pod_sets.order_by("index")] == [
        (0, 1, 0, ["a100-80g"], None), (1, 2, 8, ["a100-80g"], 40)]


def test_live_check_counts_every_pod_set(alice):
    r = alice.post("/workloads/new/check/", {**BASE, **pod_rows(LAUNCHER, WORKERS)})
    assert "<strong>16 GPUs</strong>" in r.content.decode()


def test_a_removed_pod_set_is_left_out(alice):
    data = {**BASE, **pod_rows(WORKERS, {**LAUNCHER, "DELETE": "on"})}
    r = alice.post("/workloads/new/", data)
    assert r.status_code == 302
    w = Workload.objects.get(name="ddp-run")
    assert [(p.count, p.gpus) for p in w.pod_sets.all()] == [(2, 8)]


def test_errors_land_on_their_row_and_nothing_is_saved(alice):
    bad = {**WORKERS, "gpus": 65}
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(LAUNCHER, bad)})
    html = r.content.decode()
    assert r.status_code == 200 and not Workload.objects.exists()
    assert "Ensure this value is less than or equal to 64" in html
    # The message sits in the second row's fieldset.
    second = html.split('aria-label="Pod set 2"')[1]
    assert "Ensure this value is less than or equal to 64" in second.split("</fieldset>")[0]
    # The live check names the row.
    r = alice.post("/workloads/new/check/", {**BASE, **pod_rows(LAUNCHER, bad)})
    assert "pod set 2: gpus: Ensure this value is less than or equal to 64" in (
        r.content.decode())


def test_removing_every_pod_set_is_refused(alice):
    r = alice.post("/workloads/new/", {**BASE, **pod_rows({**WORKERS, "DELETE": "on"})})
    assert r.status_code == 200 and not Workload.objects.exists()
    assert "Please submit at least 1 form" in r.content.decode()


def test_more_pod_sets_than_allowed_is_refused(alice):
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(*[WORKERS] * 9)})
    assert r.status_code == 200 and not Workload.objects.exists()
    assert "Please submit at most 8 forms" in r.content.decode()


def test_the_form_without_its_management_data_is_an_error_not_a_crash(alice):
    r = alice.post("/workloads/new/", {**BASE, "count": 1, "gpus": 1})
    assert r.status_code == 200 and not Workload.objects.exists()
    assert "Please submit at least 1 form" in r.content.decode()


def test_add_is_capped_at_the_maximum(alice):
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(*[WORKERS] * 8), "add_pod_set": "1"})
    html = r.content.decode()
    assert 'name="pods-TOTAL_FORMS" value="8"' in html and 'id="add-pod-set"' not in html


def test_logged_out_is_sent_to_login():
    r = Client().get("/workloads/new/")
    assert r.status_code == 302 and "/login" in r["Location"]


MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def mig_nodes(org):
    """Two a100-80g nodes advertise MIG slices (stored in thousandths, as the sync writes)."""
    from scheduling.models import Node

    Node.objects.filter(name__in=["bj-a100-0", "bj-a100-1"]).update(
        resources={MIG: 7000, "ephemeral-storage": 500 * 2**30})
    return org


def test_the_form_offers_the_advertised_resources(alice, mig_nodes):
    html = alice.get("/workloads/new/").content.decode()
    assert 'name="pods-0-resources"' in html and 'list="advertised-resources"' in html
    advertised = html.split('id="advertised"')[1].split("</div>")[0]
    assert f"<code>{MIG}</code> (7)" in advertised
    assert "<code>ephemeral-storage</code> (500 GiB)" in advertised
    assert f'<option value="{MIG}=1">' in html


def test_extended_resources_are_submitted_exactly(alice, mig_nodes):
    row = {**LAUNCHER, "gpus": 0, "resources": f"{MIG}=2, ephemeral-storage: 100Gi"}
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(row)})
    assert r.status_code == 302
    ps = Workload.objects.get(name="ddp-run").pod_sets.get()
    assert ps.resources == {MIG: 2000, "ephemeral-storage": 100 * 2**30}


def test_the_live_check_shows_what_is_asked_against_what_is_free(alice, mig_nodes):
    row = {**LAUNCHER, "count": 3, "resources": f"{MIG}=2"}
    html = alice.post("/workloads/new/check/", {**BASE, **pod_rows(row)}).content.decode()
    table = html.split('id="request-resources"')[1].split("</table>")[0]
    mig_row = table.split(f"<code>{MIG}</code>")[1].split("</tr>")[0]
    # 3 pods x 2 slices asked; 2 nodes x 7 installed, all free; 7 at most on one node.
    assert re.findall(r'<td class="num">(?:<span class="warn">)?([^<]+)', mig_row) == [
        "6", "14", "14", "7"]


@pytest.mark.parametrize("text, message", [
    (f"{MIG}=0.0001", f"{MIG}: 0.0001 has more than 3 decimal places"),
    (f"{MIG}=4Q", f"{MIG}: &#x27;4Q&#x27; is not a Kubernetes quantity"),
    ("nvidia.com/gpu=1", "nvidia.com/gpu: has a field of its own (gpus, cpu, memory_gib)"),
    ("slices", "&#x27;slices&#x27; is not name=quantity (like nvidia.com/mig-1g.10gb=1)"),
    (f"{MIG}=1, {MIG}=2", f"{MIG}: listed twice"),
])
def test_bad_resources_name_the_item_and_save_nothing(alice, mig_nodes, text, message):
    row = {**LAUNCHER, "resources": text}
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(WORKERS, row)})
    html = r.content.decode()
    assert r.status_code == 200 and not Workload.objects.exists()
    second = html.split('aria-label="Pod set 2"')[1].split("</fieldset>")[0]
    assert message in second
    r = alice.post("/workloads/new/check/", {**BASE, **pod_rows(WORKERS, row)})
    assert f"pod set 2: resources: {message}" in r.content.decode()


def test_a_resource_no_node_advertises_can_never_run(alice, mig_nodes):
    row = {**LAUNCHER, "resources": "nvidia.com/mig-3g.40gb=1"}
    html = alice.post("/workloads/new/check/", {**BASE, **pod_rows(row)}).content.decode()
    assert "never" in html and "FLAVOR_UNAVAILABLE" in html
    assert "no a100-80g node advertises nvidia.com/mig-3g.40gb" in html
    r = alice.post("/workloads/new/", {**BASE, **pod_rows(row)})
    assert r.status_code == 400 and not Workload.objects.exists()
    assert "nvidia.com/mig-3g.40gb" in r.content.decode()


def test_the_cost_estimate_counts_fractions_and_slices(alice, mig_nodes):
    """2 pods of a quarter card and 7 x 1g slices each: 2 x (0.25 + 1) = 2.5 cards billed at
    the GPU rate (2.00/h): 5.00/h, 15.00 over the 3 h expected."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from billing.services import rate_card_create

    row = {**LAUNCHER, "count": 2, "gpus": "0.25", "resources": f"{MIG}=7"}
    # Without a rate for the flavor there is no estimate (not a zero one).
    html = alice.post("/workloads/new/check/", {**BASE, **pod_rows(row)}).content.decode()
    assert 'id="request-cost"' not in html and "Can it ever fit?" in html
    rate_card_create(flavor=mig_nodes.a100, resource="gpu", rate=Decimal("2.00"),
                     effective_from=timezone.now() - timedelta(days=1))
    html = alice.post("/workloads/new/check/",
                      {**BASE, "duration_h": "3", **pod_rows(row)}).content.decode()
    line = html.split('id="request-cost"')[1].split("</li>")[0]
    assert "<strong>5.00 EUR/h</strong> (2.5 GPUs billed, MIG slices as their" in line
    assert "<strong>15.00 EUR</strong> over the expected duration" in line


def test_a_notebook_with_a_time_limit_and_a_bad_one_on_its_field(alice):
    notebook = {**BASE, "name": "lab", "interactive": "on", "image": "quay.io/jupyter/x:1",
                "command": ""}
    r = alice.post("/workloads/new/", {**notebook, "time_limit_h": "0.01", **pod_rows(WORKERS)})
    assert r.status_code == 200 and not Workload.objects.exists()
    assert "Ensure this value is greater than or equal to 0.1." in r.content.decode()
    r = alice.post("/workloads/new/", {**{k: v for k, v in notebook.items()
                                          if k != "interactive"},
                                       "time_limit_h": "2", **pod_rows(WORKERS)})
    assert r.status_code == 200 and not Workload.objects.exists()
    assert "only an interactive session (interactive: true) has a time limit" in \
        r.content.decode()
    r = alice.post("/workloads/new/", {**notebook, "time_limit_h": "2.5", **pod_rows(WORKERS)})
    assert r.status_code == 302
    w = Workload.objects.get(name="lab")
    assert w.interactive and w.time_limit_s == 9000


def test_sessions_get_the_priority_class_an_admin_sets(alice, org):
    """An admin's priority policy on `request.interactive` ("sessions are inference-high"):
    a notebook from the request page and one from the API get the class, a batch job keeps
    the one it asked."""
    import json

    from policies.services import policy_create
    from tests.factories import UserFactory

    admin = UserFactory(username="root-sessions", is_staff=True, is_superuser=True)
    policy_create(user=admin, data={
        "name": "sessions-high", "kind": "priority", "mode": "enforce",
        "match": "request.interactive", "rule": '"inference-high"'})
    notebook = {**BASE, "name": "lab", "interactive": "on", "image": "quay.io/jupyter/x:1",
                "command": ""}
    assert alice.post("/workloads/new/", {**notebook, **pod_rows(WORKERS)}).status_code == 302
    assert alice.post("/workloads/new/", {**BASE, **pod_rows(WORKERS)}).status_code == 302
    body = {"queue": "rd/vision", "name": "lab-api", "interactive": True,
            "priority_class": "training", "image": "quay.io/jupyter/x:1",
            "pods": [{"count": 1, "gpus": 1, "cpu": 4, "memory_gib": 16,
                      "flavors": ["a100-80g"]}]}
    r = alice.post("/api/v1/workloads", json.dumps(body), content_type="application/json")
    assert r.status_code == 201, r.content
    assert r.json()["priority_class"] == "inference-high"
    classes = dict(Workload.objects.values_list("name", "priority_class__name"))
    assert classes == {"lab": "inference-high", "ddp-run": "training",
                       "lab-api": "inference-high"}
    said = [e.message for e in Workload.objects.get(name="lab").events.all()]
    assert "priority class training -> inference-high (set by policy sessions-high)" in said
