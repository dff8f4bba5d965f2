"""Home page (alice's dashboard), tree page (htmx partial, query budget), admin tree rules."""

from decimal import Decimal

import pytest
from django.urls import reverse

from quotas.models import Queue, QuotaEntry, TeamRole
from quotas.services import queue_create
from quotas.tree_rules import QuotaSpec
from tests.factories import (
    AdminFactory,
    FlavorFactory,
    TeamFactory,
    TeamMembershipFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db
A = ("a100-80g", "gpu")


@pytest.fixture
def tree():
    FlavorFactory(name="a100-80g")
    rd = queue_create(name="rd", quota={A: QuotaSpec(Decimal(16), Decimal(32), Decimal(8))}).queue
    vision = queue_create(name="vision", parent=rd, quota={A: QuotaSpec(Decimal(8))}).queue
    queue_create(name="nlp", parent=rd)
    alice = UserFactory(username="alice")
    team = TeamFactory(name="vision")
    team.queues.add(vision)
    TeamMembershipFactory(team=team, user=alice, role=TeamRole.RESEARCHER)
    return {"rd": rd, "vision": vision, "alice": alice}


def test_home_is_alices_dashboard_linking_the_tree(client, tree):
    client.force_login(tree["alice"])
    response = client.get(reverse("home"))
    assert response.status_code == 200
    assert [t.name for t in response.templates][0] == "portal/dashboard.html"
    html = response.content.decode()
    assert "<h1>Dashboard</h1>" in html
    assert 'href="/queues/q/rd/vision/"' in html  # her queue's card
    assert 'href="/tree/"' in html
    assert '<a href="/dashboard/" aria-current="page">Dashboard</a>' in html
    # The whole tree (min / max / lendable) loads into the home page from its partial.
    assert 'hx-get="/tree/partial/?embedded=1" hx-trigger="load, every 10s"' in html


def test_tree_page_shows_tree_for_alice(client, tree):
    client.force_login(tree["alice"])
    response = client.get(reverse("tree"))
    assert response.status_code == 200
    html = response.content.decode()
    # her part of the tree only, as the API and /queues/ show it (rd/nlp is another team's)
    assert 'data-path="rd/vision"' in html and 'data-path="rd/nlp"' not in html
    assert "a100-80g gpu" in html
    assert "16 / 32 / 8" in html  # rd
    assert "8 / 32 / 8" in html  # vision: max inherited
    assert "<code>rd-vision</code>" in html
    assert html.count('class="pill-ok">yours<') == 1
    assert 'hx-get="/tree/partial/"' in html


def test_tree_partial(client, tree):
    client.force_login(tree["alice"])
    response = client.get(reverse("tree-partial"), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html and 'data-path="rd"' in html


def test_tree_query_budget(client, tree, django_assert_max_num_queries):
    for i in range(15):
        queue_create(name=f"p{i}", parent=Queue.objects.get(path="rd/nlp") if i == 0 else
                     Queue.objects.get(path="rd/nlp/p0"))
    client.force_login(tree["alice"])
    # Constant in the tree size (session, user, tree, quotas, usage, teams, the user's scope;
    # the user's time zone and unread notifications, each cached after this first page).
    with django_assert_max_num_queries(18):
        response = client.get(reverse("tree"))
    assert response.status_code == 200


def _admin_client(client):
    client.force_login(AdminFactory())
    return client


def _form(parent, name, rows, prefix="quotas"):
    data = {
        "parent": parent.pk if parent else "", "name": name, "strategy": "", "namespace": "",
        "description": "",
        f"{prefix}-TOTAL_FORMS": str(len(rows)), f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "0", f"{prefix}-MAX_NUM_FORMS": "1000",
    }
    for i, row in enumerate(rows):
        for k, v in row.items():
            data[f"{prefix}-{i}-{k}"] = v
    return data


def test_admin_changelist_is_indented_tree(client, tree):
    response = _admin_client(client).get(reverse("admin:quotas_queue_changelist"))
    html = response.content.decode()
    assert response.status_code == 200
    assert '<span style="padding-left:1.5em">└ vision</span>' in html
    assert "a100-80g/gpu 16/32/8" in html


def test_admin_add_breaking_v2_shows_error_and_saves_nothing(client, tree):
    flavor_pk = QuotaEntry.objects.first().flavor_id
    data = _form(tree["rd"], "audio", [
        {"flavor": flavor_pk, "resource": "gpu", "min": "9", "max": "", "lendable": ""},
    ])
    response = _admin_client(client).post(reverse("admin:quotas_queue_add"), data)
    assert response.status_code == 200  # the form again, with errors
    assert "rd: a100-80g/gpu: children&#x27;s min 17 &gt; min 16" in response.content.decode()
    assert not Queue.objects.filter(path="rd/audio").exists()


def test_admin_add_valid_saves_with_quota_and_warning(client, tree):
    flavor_pk = QuotaEntry.objects.first().flavor_id
    data = _form(tree["rd"], "audio", [
        {"flavor": flavor_pk, "resource": "gpu", "min": "4", "max": "", "lendable": "0"},
    ])
    response = _admin_client(client).post(reverse("admin:quotas_queue_add"), data, follow=True)
    assert response.status_code == 200
    entry = QuotaEntry.objects.get(queue__path="rd/audio")
    assert (entry.min, entry.max, entry.lendable) == (4, None, 0)
    assert Queue.objects.get(path="rd/audio").namespace == "rd-audio"


def test_admin_change_and_warning(client, tree):
    from quotas.services import quota_set
    quota_set(queue=Queue.objects.get(path="rd/nlp"), flavor="a100-80g", resource="gpu",
              min=0, max=4)
    vision = tree["vision"]
    entry = QuotaEntry.objects.get(queue=vision)
    data = _form(tree["rd"], "vision", [
        {"id": entry.pk, "queue": vision.pk, "flavor": entry.flavor_id, "resource": "gpu",
         "min": "8", "max": "8", "lendable": ""},
    ])
    data["quotas-INITIAL_FORMS"] = "1"
    response = _admin_client(client).post(
        reverse("admin:quotas_queue_change", args=[vision.pk]), data, follow=True
    )
    html = response.content.decode()
    assert ("Saved with a warning: rd: a100-80g/gpu: children&#x27;s max 12 &lt; min 16: some "
            "capacity can never be used") in html
    entry.refresh_from_db()
    assert entry.max == 8


def test_admin_delete_with_children_refused(client, tree):
    rd = tree["rd"]
    response = _admin_client(client).post(
        reverse("admin:quotas_queue_delete", args=[rd.pk]), {"post": "yes"}, follow=True
    )
    assert "has 2 child queue(s)" in response.content.decode()
    assert Queue.objects.filter(path="rd").exists()


def test_other_admin_pages_render(client, tree):
    c = _admin_client(client)
    for name in ("quotas_flavor", "quotas_team", "quotas_quotaentry", "portal_apitoken",
                 "scheduling_cluster", "scheduling_node"):
        assert c.get(reverse(f"admin:{name}_changelist")).status_code == 200, name
