"""The history page and the History sections of object pages."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from core.history import Source, history_context
from portal.history.kinds import BY_KEY
from quotas.services import flavor_update, quota_set
from scheduling.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def edits(org):
    with history_context(Source.API, user=org.bob):
        quota_set(queue=org.vision, flavor="a100-80g", resource="gpu", min=10)
    with history_context(Source.PAGE, user=org.admin):
        quota_set(queue=org.nlp, flavor="a100-80g", resource="gpu", min=6)
    return org


def page(client, user, url, status=200):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == status, response.content.decode()[:500]
    return response.content.decode()


def history_section(client, html):
    """A page's History section as a browser shows it: the frame on the page, then the rows
    its htmx request loads (same session), after the frame's heading."""
    frame = html[html.index('id="history"'):]
    assert 'hx-trigger="load"' in frame[:400], frame[:400]
    url = re.search(r'hx-get="([^"]+)"', frame).group(1).replace("&amp;", "&")
    rows = client.get(url)
    assert rows.status_code == 200, rows.content.decode()[:500]
    return frame[:frame.index("</section>")] + rows.content.decode()


def test_history_page_lists_who_when_path_and_what(client, edits):
    html = page(client, edits.admin, reverse("history"))
    assert '<table class="stack history">' in html  # rows stack on a phone
    assert '<a href="/queues/q/rd/vision/">rd/vision a100-80g/gpu</a>' in html
    assert "<strong>min</strong>: 8 GPUs → 10 GPUs" in html
    assert "<strong>min</strong>: 4 GPUs → 6 GPUs" in html
    assert '<td data-label="Who">bob</td>' in html
    assert '<span class="state">API</span>' in html
    assert 'name="since"' in html and 'name="object"' in html  # the filter form


def test_history_page_filters_and_refuses_bad_filters(client, edits):
    html = page(client, edits.admin, f"{reverse('history')}?user=root&source=page")
    assert "4 GPUs → 6 GPUs" in html and "8 GPUs → 10 GPUs" not in html
    html = page(client, edits.admin, f"{reverse('history')}?since=soon", status=400)
    assert "&#x27;soon&#x27; is not a date" in html
    day = (timezone.now() + timedelta(days=1)).date().isoformat()
    html = page(client, edits.admin, f"{reverse('history')}?since={day}")
    assert "No changes recorded that match." in html


def test_a_researchers_history_page_leaves_out_other_teams_queues(client, edits):
    html = page(client, edits.alice, reverse("history"))
    assert "8 GPUs → 10 GPUs" in html
    assert "rd/nlp" not in html and "4 GPUs → 6 GPUs" not in html
    html = page(client, edits.alice, f"{reverse('history')}?object=queue:{edits.nlp.pk}")
    assert "No changes recorded that match." in html


def test_queue_page_has_its_history(client, edits):
    html = page(client, edits.alice, reverse("queue-detail", args=["rd/vision"]))
    section = history_section(client, html)
    assert "changed quota rd/vision a100-80g/gpu" in section
    assert "<strong>min</strong>: 8 GPUs → 10 GPUs" in section
    assert "rd/nlp" not in section
    assert f'href="/history/?object=queue%3A{edits.vision.pk}"' in section


def test_tree_editor_has_the_trees_recent_changes(client, edits):
    html = page(client, edits.admin, reverse("queue-tree"))
    section = history_section(client, html)
    assert "8 GPUs → 10 GPUs" in section and "4 GPUs → 6 GPUs" in section
    assert 'href="/history/?type=queue&amp;type=quota"' in section


def test_cluster_and_fleet_pages_have_their_history(client, edits):
    node = Node.objects.get(name="bj-a100-1")
    with history_context(Source.ADMIN, user=edits.admin):
        node.gpus, node.ready = 4, False
        node.save()
    with history_context(Source.ADMIN, user=edits.admin):
        flavor_update(flavor=edits.a100, gpu_memory_gib=96)
    html = page(client, edits.alice, reverse("cluster-detail", args=["bj"]))
    section = history_section(client, html)
    assert "changed node bj/bj-a100-1" in section
    assert "<strong>gpus</strong>: 8 GPUs → 4 GPUs" in section
    assert "<strong>ready</strong>: yes → no" in section
    html = page(client, edits.alice, reverse("fleet"))
    section = history_section(client, html)
    assert "<strong>gpu memory gib</strong>: 80 GiB → 96 GiB" in section
    assert "bj/bj-a100-1" in section


def test_policy_page_has_its_history(client, org):
    client.force_login(org.admin)
    r = client.post(reverse("policy-new"), {
        "name": "cap", "kind": "validate", "match": "true", "rule": "request.gpus <= 64",
        "message": "", "key": "", "mode": "audit", "scope": "", "order": "100",
        "description": "", "comment": "",
    })
    assert r.status_code == 302, r.content.decode()[:2000]
    html = page(client, org.admin, reverse("policy-edit", args=["cap"]))
    section = history_section(client, html)
    assert "created" in section and "portal page" in section and ">root<" in section
    assert "<strong>rule</strong>: – → request.gpus &lt;= 64" in section


def test_rates_and_costs_pages_have_their_history(client, org):
    from billing.models import TeamCostCenter
    from billing.services import budget_create, rate_card_create
    from billing.services.rates import cost_center_create

    cc = cost_center_create(code="cv", name="Vision")
    TeamCostCenter.objects.create(team=org.vision_team, cost_center=cc)
    with history_context(Source.API, user=org.admin):
        rate_card_create(flavor=org.a100, resource="gpu", rate=Decimal("2.5"),
                         effective_from=timezone.now())
        budget_create(cost_center=cc, amount=Decimal(5000))
    html = page(client, org.alice, reverse("billing-rates"))
    section = history_section(client, html)
    assert "a100-80g gpu v1" in section
    assert "<strong>rate</strong>: – → 2.5 EUR per GPU-hour" in section
    html = page(client, org.alice, reverse("billing-overview"))
    section = history_section(client, html)
    assert "cv monthly" in section and "5,000.00 EUR" in section


def test_a_pages_history_section_costs_the_page_no_query(client, edits):
    """The section's rows load after the page: the page renders only the frame."""
    client.force_login(edits.admin)
    url = reverse("queue-detail", args=["rd/vision"])
    client.get(url)  # caches warm
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        html = client.get(url).content.decode()
    assert "history" not in " ".join(q["sql"] for q in ctx.captured_queries).lower()
    assert 'hx-get="/history/section/?object=queue%3A' in html


def test_a_section_for_a_queue_the_user_may_not_see_is_empty(client, edits):
    html = page(client, edits.alice,
                f"{reverse('history-section')}?object=queue:{edits.nlp.pk}&hide=queue")
    assert "rd/nlp" not in html and "4 GPUs → 6 GPUs" not in html


def test_a_section_of_an_unknown_type_is_a_400(client, edits):
    client.force_login(edits.admin)
    response = client.get(reverse("history-section"), {"type": ["queue", "workload"]})
    assert response.status_code == 400
    assert response.content.decode() == (
        "unknown type(s) 'workload': one of " + ", ".join(BY_KEY))
