"""Each path a change can come by records the right user, path and before/after."""

from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from core.history import BASELINE_REASON, Source, history_context
from quotas.capacity.models import CapacityRequest
from quotas.capacity.services import capacity_requests_process_due
from quotas.models import Flavor, Queue, QuotaEntry
from quotas.services import queue_update
from scheduling.backends.base import NodeInfo
from scheduling.fleet.sync import sync_nodes
from scheduling.models import Cluster, Node
from tests.integration.history.conftest import api_for, changes, history

pytestmark = pytest.mark.django_db

HQuota = QuotaEntry.history.model


def latest(model, **filters):
    return model.history.filter(**filters).order_by("-history_id").first()


def test_api_edit_records_the_token_user_api_and_before_after(org):
    r = api_for(org.admin).patch("/api/v1/queues/rd/vision",
                                 {"quota": {"a100-80g": {"gpu": {"min": 10}}}}, format="json")
    assert r.status_code == 200, r.content
    row = latest(QuotaEntry, id=org.vision_entry.pk)
    # DRF's token authentication puts its user on the request simple-history reads.
    assert row.history_user == org.admin and row.history_source == Source.API
    [entry] = history(api_for(org.admin), object=f"queue:{org.vision.pk}", source="api")["results"]
    assert entry["user"] == "root" and entry["action"] == "changed"
    assert entry["object_label"] == "rd/vision a100-80g/gpu"
    assert changes(entry) == {"min": ("8 GPUs", "10 GPUs")}
    assert entry["changes"][0]["before"] == "8" and entry["changes"][0]["after"] == "10"


def test_admin_edit_records_the_admin_and_admin(org, client):
    client.force_login(org.admin)
    data = {
        "parent": org.rd.pk, "name": "vision", "strategy": "", "namespace": "rd-vision",
        "description": "", "quotas-TOTAL_FORMS": "1", "quotas-INITIAL_FORMS": "1",
        "quotas-MIN_NUM_FORMS": "0", "quotas-MAX_NUM_FORMS": "1000",
        "quotas-0-id": org.vision_entry.pk, "quotas-0-queue": org.vision.pk,
        "quotas-0-flavor": org.a100.pk, "quotas-0-resource": "gpu", "quotas-0-min": "12",
        "quotas-0-max": "24", "quotas-0-lendable": "",
    }
    r = client.post(reverse("admin:quotas_queue_change", args=[org.vision.pk]), data)
    assert r.status_code == 302, r.content.decode()[:2000]
    row = latest(QuotaEntry, id=org.vision_entry.pk)
    assert row.history_user == org.admin and row.history_source == Source.ADMIN
    [entry] = history(api_for(org.admin), object=f"queue:{org.vision.pk}",
                      source="admin")["results"]
    assert changes(entry) == {"min": ("8 GPUs", "12 GPUs"),
                              "max": ("unset (the parent's max)", "24 GPUs")}
    # The queue itself did not change: no row for it.
    assert not Queue.history.filter(id=org.vision.pk, history_source=Source.ADMIN).exists()


def test_admin_history_page_lists_the_path(org, client):
    client.force_login(org.admin)
    Flavor.objects.filter(pk=org.a100.pk).update(notes="")
    r = client.get(reverse("admin:quotas_flavor_history", args=[org.a100.pk]))
    assert r.status_code == 200
    assert "<th scope=\"col\">source</th>" in r.content.decode()
    # Reverting from a historical version would go around the services: refused.
    version = Flavor.history.filter(id=org.a100.pk).first()
    r = client.post(reverse("admin:quotas_flavor_simple_history",
                            args=[org.a100.pk, version.history_id]), {"name": "x"})
    assert r.status_code == 403


def test_tree_editor_records_page_and_the_cells(org, client):
    client.force_login(org.admin)
    cell = f"c|{org.vision.pk}|a100-80g|gpu|"
    r = client.post(reverse("queue-tree"), {cell + "min": "10", cell + "max": "",
                                            cell + "lendable": ""})
    assert r.status_code == 302
    row = latest(QuotaEntry, id=org.vision_entry.pk)
    assert (row.history_user, row.history_source, row.min) == (org.admin, Source.PAGE,
                                                               Decimal(10))
    page = client.get(reverse("history-section") + f"?object=queue:{org.vision.pk}&hide=queue")
    assert "<strong>min</strong>: 8 GPUs → 10 GPUs" in page.content.decode()
    assert "portal page" in page.content.decode()


def test_import_records_import_with_the_user_given(org, tmp_path: Path):
    manifest = tmp_path / "volcano.yaml"
    manifest.write_text("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: rd}
spec:
  deserved: {a100-80g.allot.io/gpu: "16"}
  capability: {a100-80g.allot.io/gpu: "32"}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: rd.vision, annotations: {allot.io/namespace: rd-vision}}
spec:
  parent: rd
  deserved: {a100-80g.allot.io/gpu: "12"}
""")
    call_command("import_quotas", str(manifest), "--user", "root", stdout=open("/dev/null", "w"))
    row = latest(QuotaEntry, id=org.vision_entry.pk)
    assert (row.history_user, row.history_source) == (org.admin, Source.IMPORT)
    [entry] = [e for e in history(api_for(org.admin), source="import")["results"]
               if e["object"] == f"quota:{org.vision_entry.pk}"]
    assert changes(entry)["min"] == ("8 GPUs", "12 GPUs")
    assert entry["user"] == "root"


def test_import_without_user_is_recorded_with_no_user(org, tmp_path: Path):
    manifest = tmp_path / "volcano.yaml"
    manifest.write_text("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: rd}
spec:
  deserved: {a100-80g.allot.io/gpu: "16"}
  capability: {a100-80g.allot.io/gpu: "32"}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: rd.nlp, annotations: {allot.io/namespace: rd-nlp}}
spec:
  parent: rd
  deserved: {a100-80g.allot.io/gpu: "6"}
""")
    call_command("import_quotas", str(manifest), stdout=open("/dev/null", "w"))
    row = latest(QuotaEntry, id=org.nlp_entry.pk)
    assert (row.history_user, row.history_source, row.min) == (None, Source.IMPORT, Decimal(6))


def test_capacity_request_records_capacity_request_the_decider_and_the_request(org):
    r = api_for(org.alice).post("/api/v1/capacity-requests", {
        "queue": "rd/vision", "flavor": "a100-80g", "resource": "gpu", "min": 12, "max": None,
        "justification": "deadline", "ends_at": (timezone.now()
                                                 + timezone.timedelta(hours=1)).isoformat(),
    }, format="json")
    assert r.status_code == 201, r.content
    pk = r.json()["id"]
    # Approved through the API by the vision lead: the path is the capacity request.
    r = api_for(org.bob).post(f"/api/v1/capacity-requests/{pk}/approve", {}, format="json")
    assert r.status_code == 200, r.content
    row = latest(QuotaEntry, id=org.vision_entry.pk)
    assert (row.history_user, row.history_source) == (org.bob, Source.CAPACITY_REQUEST)
    assert row.history_change_reason == f"capacity request #{pk} applied"
    # Reverted by the beat when its period ends: no one's edit, still the request's path.
    capacity_requests_process_due(now=timezone.now() + timezone.timedelta(hours=2))
    assert CapacityRequest.objects.get(pk=pk).state == "reverted"
    row = latest(QuotaEntry, id=org.vision_entry.pk)
    assert (row.history_user, row.history_source, row.min) == (
        None, Source.CAPACITY_REQUEST, Decimal(8))
    results = history(api_for(org.admin), source="capacity_request")["results"]
    assert [(e["user"], changes(e)["min"], e["reason"]) for e in results] == [
        (None, ("12 GPUs", "8 GPUs"), f"capacity request #{pk} reverted"),
        ("bob", ("8 GPUs", "12 GPUs"), f"capacity request #{pk} applied"),
    ]


def test_sync_records_new_nodes_but_not_capacity_flaps(org):
    class Backend:
        def __init__(self, infos):
            self.infos = infos

        def list_nodes(self, flavors):
            return self.infos

    def info(name, gpus, ready=True):
        return NodeInfo(name=name, flavor="a100-80g", gpus=gpus, cpu=Decimal(64),
                        memory_gib=Decimal(512), ready=ready)

    known = [info("bj-a100-0", 8), info("bj-a100-1", 8)]
    before = Node.history.count()
    sync_nodes(org.cluster, Backend([*known, info("bj-a100-9", 4)]))
    new = Node.objects.get(name="bj-a100-9")
    assert [(h.history_type, h.history_source) for h in new.history.all()] == [("+", "sync")]
    # Readiness and capacity flap with every look: updated in bulk, not recorded.
    sync_nodes(org.cluster, Backend([info("bj-a100-0", 6, ready=False), known[1],
                                               info("bj-a100-9", 4)]))
    assert Node.objects.get(name="bj-a100-0").gpus == 6
    assert Node.history.count() == before + 1


def test_dispatch_penalty_writes_no_history_but_an_edit_does(org):
    cluster = Cluster.objects.get(pk=org.cluster.pk)
    before = Cluster.history.count()
    cluster.health_penalty, cluster.health_penalty_until = 0.6, timezone.now()
    cluster.save(update_fields=["health_penalty", "health_penalty_until"])
    assert Cluster.history.count() == before
    with history_context(Source.API, user=org.admin):
        cluster.region = "shanghai"
        cluster.save()
    row = latest(Cluster, id=cluster.pk)
    assert (row.history_source, row.history_user, row.region) == ("api", org.admin, "shanghai")


def test_move_records_the_path_change_of_the_queue_and_below(org):
    queue_create_deep = Queue.objects.create(name="det", parent=org.vision)
    queue_update(queue=org.vision, parent=None)
    rows = {h.id: h for h in Queue.history.filter(history_type="~").order_by("history_id")}
    assert rows[org.vision.pk].path == "vision"
    assert rows[queue_create_deep.pk].path == "vision/det"
    results = history(api_for(org.admin), type="queue")["results"]
    by_object = {e["object"]: changes(e) for e in results if e["action"] == "changed"}
    assert by_object[f"queue:{org.vision.pk}"] == {
        "parent": ("rd", "none (top level)"), "path": ("rd/vision", "vision")}
    assert by_object[f"queue:{queue_create_deep.pk}"] == {"path": ("rd/vision/det",
                                                                   "vision/det")}


def test_unchanged_saves_leave_no_row(org):
    before = (Queue.history.count(), QuotaEntry.history.count(), Flavor.history.count())
    r = api_for(org.admin).patch("/api/v1/queues/rd/vision",
                                 {"quota": {"a100-80g": {"gpu": {"min": 8}}}}, format="json")
    assert r.status_code == 200
    r = api_for(org.admin).patch("/api/v1/flavors/a100-80g", {"gpu_memory_gib": 80},
                                 format="json")
    assert r.status_code == 200
    assert (Queue.history.count(), QuotaEntry.history.count(), Flavor.history.count()) == before


def test_a_leaf_getting_a_child_records_its_namespace_cleared(org):
    r = api_for(org.admin).post("/api/v1/queues", {"parent": "rd/nlp", "name": "asr"},
                                format="json")
    assert r.status_code == 201, r.content
    row = latest(Queue, id=org.nlp.pk)
    assert (row.history_source, row.history_user, row.namespace) == ("api", org.admin, "")


def test_baseline_rows_give_the_first_change_a_before_and_are_not_listed(org):
    # As the migration writes them for objects that existed before the history did.
    Queue.history.filter(id=org.nlp.pk).delete()
    entry = QuotaEntry.history.filter(id=org.nlp_entry.pk)
    entry.delete()
    HQuota.objects.create(id=org.nlp_entry.pk, queue_id=org.nlp.pk, flavor_id=org.a100.pk,
                          resource="gpu", min=Decimal(4), history_date=timezone.now(),
                          history_type="~", history_change_reason=BASELINE_REASON)
    api = api_for(org.admin)
    assert history(api, object=f"queue:{org.nlp.pk}")["count"] == 0
    r = api.patch("/api/v1/queues/rd/nlp", {"quota": {"a100-80g": {"gpu": {"min": 5}}}},
                  format="json")
    assert r.status_code == 200
    [entry] = history(api, object=f"queue:{org.nlp.pk}")["results"]
    assert changes(entry) == {"min": ("4 GPUs", "5 GPUs")} and entry["before_known"]


def test_policy_edits_are_recorded_by_path(org):
    api = api_for(org.admin)
    r = api.post("/api/v1/policies", {"name": "no-huge", "kind": "validate",
                                      "rule": "request.gpus <= 64", "mode": "audit"},
                 format="json")
    assert r.status_code == 201, r.content
    r = api.patch("/api/v1/policies/no-huge", {"mode": "enforce"}, format="json")
    assert r.status_code == 200, r.content
    results = history(api, type="policy")["results"]
    assert [(e["action"], e["source"], e["user"]) for e in results] == [
        ("changed", "api", "root"), ("created", "api", "root")]
    assert changes(results[0]) == {"mode": ("audit (record, allow)", "enforce"),
                                   "version": ("1", "2")}


def test_an_import_writes_its_history_in_one_insert_per_table(org):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from quotas.services import QueueDef, tree_replace
    from quotas.tree_rules import QuotaSpec

    a100 = ("a100-80g", "gpu")
    defs = [QueueDef(path="rd", quota={a100: QuotaSpec(Decimal(16), Decimal(32), Decimal(8))}),
            QueueDef(path="rd/vision", quota={a100: QuotaSpec(Decimal(9))}),
            QueueDef(path="rd/nlp", quota={a100: QuotaSpec(Decimal(5))}),
            QueueDef(path="rd/audio", quota={a100: QuotaSpec(Decimal(1))})]
    with CaptureQueriesContext(connection) as ctx, history_context(Source.IMPORT):
        tree_replace(queues=defs)
    inserts = [q["sql"] for q in ctx.captured_queries
               if q["sql"].startswith('INSERT INTO "quotas_historical')]
    assert len(inserts) == 2  # the new queue; the three entries that changed
    assert sorted(QuotaEntry.history.filter(history_source="import")
                  .values_list("queue__path", "min")) == [
        ("rd/audio", Decimal(1)), ("rd/nlp", Decimal(5)), ("rd/vision", Decimal(9))]
    assert list(Queue.history.filter(history_source="import").values_list("path", "history_type")
                ) == [("rd/audio", "+")]
