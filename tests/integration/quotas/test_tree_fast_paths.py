"""The queue tree's fast paths give the same results: usage, leaves, subtrees, API JSON."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from portal.pages.access import user_scope
from quotas import selectors
from quotas.api import QueueOutput, queue_output_data
from quotas.selectors import visible_nodes
from quotas.services import queue_create
from quotas.tree_rules import QuotaSpec
from scheduling.models import Admission, Cluster, PodSet, PriorityClass, Workload
from tests.factories import AdminFactory, FlavorFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db
A = ("a100-80g", "gpu")


@pytest.fixture
def tree():
    flavor = FlavorFactory(name="a100-80g")
    rd = queue_create(name="rd", quota={A: QuotaSpec(Decimal(16), Decimal(32), Decimal(8))}).queue
    vision = queue_create(name="vision", parent=rd, quota={A: QuotaSpec(Decimal(8))}).queue
    nlp = queue_create(name="nlp", parent=rd, quota={A: QuotaSpec(Decimal("0.5"))}).queue
    small = queue_create(name="small", parent=nlp).queue
    alice = UserFactory(username="alice")
    team = TeamFactory(name="vision")
    team.queues.add(vision)
    team.members.add(alice)
    pc, _ = PriorityClass.objects.get_or_create(name="training", defaults={"value": 1000})
    now = timezone.now()
    running = Workload.objects.create(
        name="big", queue=vision, team=team, owner=alice, priority_class=pc, state="running",
        submitted_at=now, state_changed_at=now)
    Admission.objects.create(
        workload=running, cluster=Cluster.objects.create(name="bj"), flavor=flavor,
        nodes=["n1", "n2"], gpus=12, cpu=Decimal(24), memory_gib=Decimal(256), reserved_at=now,
        running_at=now)
    waiting = Workload.objects.create(
        name="wait", queue=small, owner=alice, priority_class=pc, state="pending",
        submitted_at=now, state_changed_at=now)
    PodSet.objects.create(workload=waiting, index=0, count=2, flavors=["a100-80g"], gpus=4,
                          cpu=Decimal(8), memory_gib=Decimal(64))
    return {"alice": alice, "rd": rd, "vision": vision, "nlp": nlp, "small": small}


def _by_path(nodes, out=None):
    out = {} if out is None else out
    for n in nodes:
        out[n["path"]] = n
        _by_path(n["children"], out)
    return out


def test_tree_carries_quota_usage_and_leaves(tree):
    nodes = _by_path(selectors.queue_tree(user=tree["alice"]))
    assert list(nodes) == ["rd", "rd/nlp", "rd/nlp/small", "rd/vision"]
    vision = nodes["rd/vision"]["quota"]["a100-80g"]["gpu"]
    assert (vision["min"], vision["max"], vision["used"], vision["borrowed"]) == (
        Decimal(8), Decimal(32), Decimal(12), Decimal(4))
    assert str(nodes["rd/nlp"]["quota"]["a100-80g"]["gpu"]["min"]) == "0.5"
    assert nodes["rd/nlp/small"]["quota"]["a100-80g"]["gpu"]["pending"] == Decimal(8)
    assert nodes["rd"]["quota"]["a100-80g"]["gpu"]["used"] == Decimal(12)
    assert [p for p, n in nodes.items() if n["is_leaf"]] == ["rd/nlp/small", "rd/vision"]
    assert [p for p, n in nodes.items() if n["can_submit"]] == ["rd/vision"]
    assert [c["path"] for c in nodes["rd"]["children"]] == ["rd/nlp", "rd/vision"]


def test_subtree_is_the_full_trees_node(tree):
    full = _by_path(selectors.queue_tree(user=tree["alice"]))
    for path, node in full.items():
        assert selectors.queue_tree(user=tree["alice"], root=path) == [node]
    assert selectors.queue_tree(user=tree["alice"], root="rd/none") == []


def test_specs_in_depth_then_path_order(tree):
    specs = selectors.tree_specs()
    assert list(specs) == ["rd", "rd/nlp", "rd/vision", "rd/nlp/small"]
    assert specs["rd/nlp/small"].parent == "rd/nlp" and specs["rd/nlp/small"].quota == {}
    assert specs["rd"].quota[A] == QuotaSpec(Decimal(16), Decimal(32), Decimal(8))


def test_query_count_does_not_grow_with_the_tree(tree):
    with CaptureQueriesContext(connection) as small:
        selectors.queue_tree(user=tree["alice"])
    parent = tree["nlp"]
    for i in range(20):  # a chain three deep, then siblings
        parent = queue_create(name=f"p{i}", parent=parent if i < 3 else tree["nlp"]).queue
    with CaptureQueriesContext(connection) as large:
        nodes = _by_path(selectors.queue_tree(user=tree["alice"]))
    assert len(nodes) == 24 and len(large) == len(small)


def test_api_queue_json_is_the_serializers(tree):
    for user in (tree["alice"], AdminFactory()):
        # The API shows each user their part of the tree (researchers: their teams' queues).
        nodes = visible_nodes(selectors.queue_tree(user=user), user_scope(user))
        expected = JSONRenderer().render(QueueOutput(nodes, many=True).data)
        assert JSONRenderer().render(queue_output_data(nodes)) == expected
        client = APIClient()
        client.force_authenticate(user)
        response = client.get("/api/v1/queues")
        assert response.status_code == 200 and response.content == expected
        if not user.is_staff:
            continue  # rd/nlp is another team's queue: 404 (tested in the queues API tests)
        detail = client.get("/api/v1/queues/rd/nlp")
        assert detail.status_code == 200
        assert detail.content == JSONRenderer().render(
            QueueOutput(selectors.queue_tree(user=user, root="rd/nlp")[0]).data)
        assert detail.json()["quota"]["a100-80g"]["gpu"]["min"] == 0.5


def test_queue_page_charts_from_one_interval_query(client, tree):
    import json

    client.force_login(tree["alice"])
    with CaptureQueriesContext(connection) as queries:
        html = client.get("/queues/q/rd/").content.decode()
    admission_queries = [q for q in queries if 'FROM "scheduling_admission"' in q["sql"]
                         and '"reserved_at" <' in q["sql"]]
    assert len(admission_queries) == 1  # 24 h and 30 days charts share it
    for span in ("24h", "30days"):
        start = html.index(">", html.index(f'id="chart-a100-80g-{span}-data"')) + 1
        figure = json.loads(html[start:html.index("</script>", start)])
        used = figure["data"][0]["y"]
        # 12 GPUs held since just now: the last bucket holds part of them, older ones none.
        assert 0 < used[-1] <= 12 and all(v == 0 for v in used[:-1])
