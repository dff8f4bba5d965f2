"""The pure tree rules (no database): defaults, structure errors, boundaries."""

from quotas.tree_rules import QueueSpec, QuotaSpec, validate_tree

A = ("a100-80g", "gpu")


def spec(path, parent=None, **quota):
    return QueueSpec(path=path, parent=parent, quota=quota)


def test_defaults_resolve_from_parent():
    report = validate_tree([
        QueueSpec("rd", None, {A: QuotaSpec(min=16, max=32)}),
        QueueSpec("rd/vision", "rd", {A: QuotaSpec(min=8)}),
        QueueSpec("rd/nlp", "rd", {}),
    ])
    assert report.ok
    vision = report.resolved["rd/vision"][A]
    assert (vision.min, vision.max, vision.lendable) == (8, 32, 8)
    nlp = report.resolved["rd/nlp"][A]
    assert (nlp.min, nlp.max, nlp.lendable) == (0, 32, 0)
    assert report.resolved["rd"][A].max == 32
    assert report.accounted == {A}


def test_top_level_unset_max_is_unlimited():
    report = validate_tree([QueueSpec("rd", None, {A: QuotaSpec(min=4)})])
    assert report.resolved["rd"][A].max is None


def test_parent_cycle_and_unknown_parent():
    report = validate_tree([QueueSpec("a", "b"), QueueSpec("b", "a"), QueueSpec("c", "zz")])
    messages = sorted(p.message for p in report.errors)
    assert messages == [
        "a: parent cycle through b",
        "b: parent cycle through a",
        "c: unknown parent queue 'zz'",
    ]


def test_duplicate_paths():
    report = validate_tree([QueueSpec("a", None), QueueSpec("a", None)])
    assert [p.message for p in report.errors] == ["a: duplicate queue"]


def test_unknown_flavor():
    report = validate_tree([QueueSpec("a", None, {("t4", "gpu"): QuotaSpec(min=1)})],
                           flavors=["a100-80g"])
    assert [p.message for p in report.errors] == ["a: unknown flavor 't4'"]


def test_w3_boundary():
    specs = [QueueSpec("a", None, {A: QuotaSpec(min=64)})]
    assert not validate_tree(specs, fleet_capacity={A: 64}).warnings
    warnings = validate_tree(specs, fleet_capacity={A: 63}).warnings
    assert [w.code for w in warnings] == ["W3"]
