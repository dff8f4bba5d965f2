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
