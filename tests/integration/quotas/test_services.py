"""The tree services: every rule and its boundary values; an error saves nothing."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from quotas import selectors
from quotas.models import Queue, QuotaEntry
from quotas.services import (
    QueueDef,
    default_namespace,
    queue_create,
    queue_delete,
    queue_update,
    quota_set,
    tree_replace,
)
from quotas.tree_rules import QuotaSpec
from tests.factories import FlavorFactory, NodeFactory, workloads_set_state

pytestmark = pytest.mark.django_db

A = ("a100-80g", "gpu")


def q(min=None, max=None, lendable=None):  # noqa: A002
    return QuotaSpec(
        min=None if min is None else Decimal(min),
        max=None if max is None else Decimal(max),
        lendable=None if lendable is None else Decimal(lendable),
    )


def snapshot():
    """Everything the tree stores, to prove an error changed nothing."""
    return (
        sorted(Queue.objects.values_list("path", "parent__path", "namespace", "strategy")),
        sorted(QuotaEntry.objects.values_list("queue__path", "flavor__name", "resource",
                                              "min", "max", "lendable")),
    )


@pytest.fixture
def tree():
    """rd (min 16, max 32, lendable 8) -> vision (min 8) ; a100 fleet of 64 GPUs."""
    FlavorFactory(name="a100-80g")
    FlavorFactory(name="h100-80g")
    for _ in range(8):
        NodeFactory(flavor=FlavorFactory(name="a100-80g"))
    rd = queue_create(name="rd", quota={A: q(16, 32, 8)}).queue
    vision = queue_create(name="vision", parent=rd, quota={A: q(8)}).queue
    return rd, vision


def error_of(fn, **kwargs):
    before = snapshot()
    with pytest.raises(ValidationError) as exc:
        fn(**kwargs)
    assert snapshot() == before, "a refused change must save nothing"
    return exc.value.messages


def test_create_sets_paths_namespaces_and_quota(tree):
    rd, vision = tree
    assert (rd.path, rd.depth, vision.path, vision.depth) == ("rd", 1, "rd/vision", 2)
    rd.refresh_from_db()
    assert rd.namespace == ""  # not a leaf any more
    assert vision.namespace == "rd-vision"
    entry = QuotaEntry.objects.get(queue=rd)
    assert (entry.min, entry.max, entry.lendable) == (16, 32, 8)


def test_default_namespace_is_dns_safe():
    assert default_namespace("rd/vision") == "rd-vision"
    long = "a" * 40 + "/" + "b" * 40
    ns = default_namespace(long)
    assert len(ns) <= 63 and not ns.endswith("-")


@pytest.mark.parametrize("lendable,ok", [(8, True), (9, False)])
def test_v1_lendable_le_min_boundary(tree, lendable, ok):
    _, vision = tree
    kwargs = dict(queue=vision, flavor="a100-80g", resource="gpu", min=8, lendable=lendable)
    if ok:
        quota_set(**kwargs)
        assert QuotaEntry.objects.get(queue=vision).lendable == 8
    else:
        assert error_of(quota_set, **kwargs) == ["rd/vision: a100-80g/gpu: lendable 9 > min 8"]


@pytest.mark.parametrize("mx,ok", [(8, True), (7, False)])
def test_v1_min_le_max_boundary(tree, mx, ok):
    _, vision = tree
    kwargs = dict(queue=vision, flavor="a100-80g", resource="gpu", min=8, max=mx)
    if ok:
        quota_set(**kwargs)
    else:
        assert error_of(quota_set, **kwargs) == ["rd/vision: a100-80g/gpu: min 8 > max 7"]


def test_v1_negative_numbers(tree):
    _, vision = tree
    msgs = error_of(quota_set, queue=vision, flavor="a100-80g", resource="gpu", min=-1)
    assert "rd/vision: a100-80g/gpu: min -1 < 0" in msgs
    msgs = error_of(quota_set, queue=vision, flavor="a100-80g", resource="gpu", min=0, max=-2)
    assert "rd/vision: a100-80g/gpu: max -2 < 0" in msgs


def test_zero_quota_is_allowed(tree):
    _, vision = tree
    quota_set(queue=vision, flavor="a100-80g", resource="gpu", min=0, max=0)
    entry = QuotaEntry.objects.get(queue=vision)
    assert (entry.min, entry.max) == (0, 0)


@pytest.mark.parametrize("child_min,ok", [(8, True), (9, False)])
def test_v2_children_min_boundary(tree, child_min, ok):
    rd, _ = tree
    kwargs = dict(name="nlp", parent=rd, quota={A: q(child_min, lendable=0)})
    if ok:
        queue_create(**kwargs)
        assert Queue.objects.filter(path="rd/nlp").exists()
    else:
        msgs = error_of(queue_create, **kwargs)
        assert "rd: a100-80g/gpu: children's min 17 > min 16" in msgs


@pytest.mark.parametrize("child_max,ok", [(32, True), (33, False)])
def test_v3_child_max_boundary(tree, child_max, ok):
    _, vision = tree
    kwargs = dict(queue=vision, flavor="a100-80g", resource="gpu", min=8, max=child_max)
    if ok:
        quota_set(**kwargs)
    else:
        assert error_of(quota_set, **kwargs) == [
            "rd/vision: a100-80g/gpu: max 33 > parent rd max 32"
        ]


def test_v4_exclusive_equal_is_allowed(tree):
    # rd: min 16, lendable 8 -> exclusive 8; vision min 8, lendable 0 -> exclusive 8 (equal).
    _, vision = tree
    quota_set(queue=vision, flavor="a100-80g", resource="gpu", min=8, lendable=0)
    assert QuotaEntry.objects.get(queue=vision).lendable == 0


def test_v4_children_exclusive_boundary(tree):
    rd, vision = tree
    quota_set(queue=vision, flavor="a100-80g", resource="gpu", min=8, lendable=0)
    # exclusive now 8 of rd's 8: one more exclusive GPU breaks V4 but not V2 (8 + 1 <= 16).
    msgs = error_of(queue_create, name="nlp", parent=rd, quota={A: q(1, lendable=0)})
    assert msgs == [
        "rd: a100-80g/gpu: children's exclusive 9 > exclusive 8 (min 16 - lendable 8)"
    ]
    queue_create(name="nlp", parent=rd, quota={A: q(1, lendable=1)})  # lendable: exclusive 0


def test_w1_warning_is_saved_and_returned(tree):
    rd, vision = tree
    change = quota_set(queue=vision, flavor="a100-80g", resource="gpu", min=8, max=10)
    assert change.warnings == [
        "rd: a100-80g/gpu: children's max 10 < min 16: some capacity can never be used"
    ]
    assert QuotaEntry.objects.get(queue=vision).max == 10
    change = quota_set(queue=vision, flavor="a100-80g", resource="gpu", min=8, max=16)
    assert not [w for w in change.warnings if "children's max" in w]


def test_w2_depth_and_width(tree, settings):
    _, vision = tree
    a = queue_create(name="a", parent=vision).queue
    change = queue_create(name="b", parent=a)  # depth 4 > 3
    assert any("rd/vision/a/b: depth 4 > 3" in w for w in change.warnings)
    parent = Queue.objects.get(path="rd")
    for i in range(4):  # rd: vision + 4 = 5 children: no width warning yet
        change = queue_create(name=f"t{i}", parent=parent)
    assert not any("children >" in w for w in change.warnings)
    change = queue_create(name="t9", parent=parent)
    assert "rd: 6 children > 5 (wide trees lengthen reclaim chains)" in change.warnings


def test_depth_limit_is_an_error(tree, settings):
    settings.ALLOT_MAX_TREE_DEPTH = 4
    _, vision = tree
    a = queue_create(name="a", parent=vision).queue
    b = queue_create(name="b", parent=a).queue  # depth 4 == limit: allowed
    assert b.depth == 4
    msgs = error_of(queue_create, name="c", parent=b)
    assert msgs == ["rd/vision/a/b/c: depth 5 > limit 4"]


def test_w3_fleet_capacity(tree):
    # fleet: 8 nodes x 8 = 64 a100 GPUs; rd has min 16.
    change = queue_create(name="ops", quota={A: q(48)})
    assert not any("installed capacity" in w for w in change.warnings)
    change = queue_create(name="ops2", quota={A: q(1)})
    assert change.warnings == [
        "(root): a100-80g/gpu: top-level min 65 > installed capacity 64: not every "
        "guarantee can be honoured"
    ]
    assert Queue.objects.filter(path="ops2").exists()


def test_unknown_flavor_and_resource(tree):
    msgs = error_of(queue_create, name="x", quota={("t4", "gpu"): q(1)})
    assert msgs == ["x: unknown flavor 't4'"]
    msgs = error_of(queue_create, name="x", quota={("a100-80g", "disk space"): q(1)})
    assert msgs == ["x: resource name 'disk space' is not a Kubernetes resource name (like cpu, "
                    "nvidia.com/mig-1g.10gb, example.com/foo)"]
    # Any extended resource name is a key (QUOTA-SEMANTICS.md §10), in its own unit.
    queue_create(name="x", quota={("a100-80g", "nvidia.com/mig-1g.10gb"): q(14)})
    entry = QuotaEntry.objects.get(resource="nvidia.com/mig-1g.10gb")
    assert (entry.min, entry.min_base) == (14, 14_000)


def test_duplicate_name_under_one_parent(tree):
    rd, _ = tree
    msgs = error_of(queue_create, name="vision", parent=rd)
    assert msgs == ["rd/vision: a queue with this path already exists"]


def test_bad_names(tree):
    msgs = error_of(queue_create, name="Vision_1")
    assert "is not a DNS-1123 label" in msgs[0] and "'Vision_1'" in msgs[0]


def test_parent_cycle_refused(tree):
    rd, vision = tree
    msgs = error_of(queue_update, queue=rd, parent=vision)
    assert msgs == [
        "rd: cannot move under rd/vision: that would make a parent cycle "
        "(a queue cannot be its own ancestor)"
    ]


def test_every_error_is_reported(tree):
    _, vision = tree
    msgs = error_of(
        queue_update, queue=vision, quota={A: q(20, 10, 30), ("h100-80g", "gpu"): q(-1)}
    )
    assert "rd/vision: h100-80g/gpu: min -1 < 0" in msgs
    # Sign errors stop the check early; once fixed, V1 and V2 both show.
    msgs = error_of(queue_update, queue=vision, quota={A: q(20, 10, 30)})
    assert "rd/vision: a100-80g/gpu: lendable 30 > min 20" in msgs
    assert "rd/vision: a100-80g/gpu: min 20 > max 10" in msgs
    assert "rd: a100-80g/gpu: children's min 20 > min 16" in msgs


def test_rename_and_move_repath_subtree(tree):
    rd, vision = tree
    queue_create(name="proj", parent=vision)
    ops = queue_create(name="ops", quota={A: q(16)}).queue
    queue_update(queue=vision, name="cv")
    assert Queue.objects.get(name="proj").path == "rd/cv/proj"
    queue_update(queue=Queue.objects.get(path="rd/cv"), parent=ops)
    assert set(Queue.objects.values_list("path", flat=True)) == {
        "rd", "ops", "ops/cv", "ops/cv/proj"
    }
    assert Queue.objects.get(path="ops/cv/proj").depth == 3


def test_namespaces_must_be_unique(tree):
    rd, vision = tree
    msgs = error_of(queue_create, name="nlp", parent=rd, namespace="rd-vision")
    assert msgs == ["rd/nlp: namespace 'rd-vision' is already used by leaf queue rd/vision"]


def test_delete_rules(tree):
    rd, vision = tree
    msgs = error_of(queue_delete, queue=rd)
    assert msgs == ["rd: has 1 child queue(s) (rd/vision); delete or move them first"]
    queue_delete(queue=vision)
    assert list(Queue.objects.values_list("path", flat=True)) == ["rd"]
    assert Queue.objects.get(path="rd").namespace == "rd"  # a leaf again


def test_quota_clear(tree):
    _, vision = tree
    quota_set(queue=vision, flavor="a100-80g", resource="gpu", clear=True)
    assert not QuotaEntry.objects.filter(queue=vision).exists()


def test_too_many_decimals(tree):
    _, vision = tree
    msgs = error_of(quota_set, queue=vision, flavor="a100-80g", resource="cpu", min="0.0005")
    assert msgs == ["rd/vision: a100-80g/cpu: min: 0.0005 has more than 3 decimal places"]


def test_tree_replace_all_or_nothing(tree):
    defs = [
        QueueDef(path="rd", quota={A: q(16, 32, 8)}),
        QueueDef(path="rd/vision", quota={A: q(8)}),
        QueueDef(path="rd/nlp", quota={A: q(10)}),  # 18 > 16
    ]
    msgs = error_of(tree_replace, queues=defs)
    assert msgs == ["rd: a100-80g/gpu: children's min 18 > min 16"]
    defs[2] = QueueDef(path="rd/nlp", quota={A: q(8)}, namespace="nlp")
    result = tree_replace(queues=defs)
    assert result.created == ["rd/nlp"] and sorted(result.updated) == ["rd", "rd/vision"]
    assert Queue.objects.get(path="rd/nlp").namespace == "nlp"


def test_tree_replace_prune(tree):
    result = tree_replace(queues=[QueueDef(path="ml", quota={A: q(4)})], prune=True)
    assert result.deleted == ["rd/vision", "rd"]
    assert list(Queue.objects.values_list("path", flat=True)) == ["ml"]


def test_selector_tree_resolves_defaults(tree):
    rows = selectors.queue_tree()
    rd = rows[0]
    vision = rd["children"][0]
    cell = vision["quota"]["a100-80g"]["gpu"]
    assert (cell["min"], cell["max"], cell["lendable"], cell["set"]) == (8, 32, 8, True)
    assert (cell["used"], cell["borrowed"], cell["lent"], cell["pending"]) == (0, 0, 0, 0)
    assert rd["quota"]["a100-80g"]["gpu"]["max"] == 32 and rd["is_leaf"] is False
    assert vision["is_leaf"] is True and vision["can_submit"] is False


def test_queue_with_open_workloads_stays_a_leaf(tree):
    from scheduling.models import PriorityClass, Workload
    from tests.factories import UserFactory

    _, vision = tree
    klass, _ = PriorityClass.objects.get_or_create(name="training", defaults={"value": 1000})
    from django.db import models
    from django.utils import timezone

    # Required timestamps of the workers' model, whatever they are named.
    stamps = {f.name: timezone.now() for f in Workload._meta.fields
              if isinstance(f, models.DateTimeField) and not f.null and not f.has_default()
              and not (f.auto_now or f.auto_now_add)}
    Workload.objects.create(name="w", queue=vision, owner=UserFactory(), priority_class=klass,
                            state="pending", **stamps)
    msgs = error_of(queue_create, name="proj", parent=vision)
    assert msgs == [
        "rd/vision: holds 1 open workload(s) (pending or admitted); a queue with workloads "
        "must stay a leaf, so it cannot get child queues until they end"
    ]
    workloads_set_state(Workload.objects.all(), "finished")
    queue_create(name="proj", parent=vision)
    assert Queue.objects.get(path="rd/vision").namespace == ""
