"""The accounting formulas of QUOTA-SEMANTICS.md §3 against hand-computed values."""

from __future__ import annotations

import pytest

from scheduling.engine import KeyQuota, QueueSpec, ReasonCode
from scheduling.engine.accounting import INF, QuotaTree

from .builders import GPU, q


def tree(queues: list[QueueSpec], cap: float) -> QuotaTree:
    t = QuotaTree(queues)
    t.set_capacity({GPU: cap})
    return t


def use(t: QuotaTree, path: str, amount: float) -> None:
    t.add(t.index[path], [(0, amount)])


def avail(t: QuotaTree, path: str) -> float:
    return t.available(t.index[path], 0)


def test_available_single_level_is_min_of_max_and_fleet() -> None:
    # a: min 8 max 16; b: min 8 max 16, lendable 8 (default = min); fleet 32.
    t = tree([q("a", 8, 16), q("b", 8, 16)], 32)
    # Nothing used: b's reserved = max(0, 8 - 8 - 0) = 0 (all of b's min is lendable).
    assert avail(t, "a") == 16
    use(t, "a", 10)
    # a: max - u = 6; fleet 32 - 10 = 22 -> 6.
    assert avail(t, "a") == 6
    assert avail(t, "b") == 16


def test_exclusive_part_of_an_idle_sibling_is_not_available() -> None:
    # b: min 8, lendable 2 -> exclusive 6 is never lent. Fleet 16.
    t = tree([q("a", 8, 16), q("b", 8, 16, lend=2)], 16)
    # reserved(b) = max(0, 8 - 0) - min(2, 8) = 6; available(a) = min(16, 16 - 6) = 10.
    assert avail(t, "a") == 10
    use(t, "b", 4)
    # b idle part = 4, lendable 2 -> reserved 2; root 16 - 4 = 12; a: min(16, 12 - 2) = 10.
    assert avail(t, "a") == 10
    use(t, "b", 4)
    # b at min: reserved 0; root 16 - 8 = 8 -> a gets 8.
    assert avail(t, "a") == 8


def test_three_levels_with_lendable_at_the_department() -> None:
    # rd (min 16, max 32, lendable 8) -> vision (min 8, max 24), nlp (min 8, max 24);
    # ops (min 8, max 8). Fleet 32.
    t = tree([q("rd", 16, 32, lend=8), q("rd/vision", 8, 24), q("rd/nlp", 8, 24),
              q("ops", 8, 8)], 32)
    # Root: 32; siblings of rd: ops reserved = 8 - 8 lendable = 0 -> rd: min(32, 32) = 32;
    # vision: min(24, 32 - reserved(nlp)=0) = 24.
    assert avail(t, "rd/vision") == 24
    # ops with lendable 8 = min: nothing reserved. Now vision uses 20.
    use(t, "rd/vision", 20)
    # vision: max 24 - 20 = 4.
    assert avail(t, "rd/vision") == 4
    # nlp: rd: min(32 - 20, 32 - 20 - 0) = 12; nlp: min(24 - 0, 12 - reserved(vision)=0) = 12.
    assert avail(t, "rd/nlp") == 12
    # ops: min(8, 12 - reserved(rd)=max(0, 8 - 20)) = 8.
    assert avail(t, "ops") == 8


def test_department_exclusive_part_is_held_for_it() -> None:
    # rd min 16 lendable 8 -> exclusive 8, idle: other top-level queues cannot take it.
    t = tree([q("rd", 16, 32, lend=8), q("rd/vision", 8, 24, lend=0), q("ops", 0, 32)], 32)
    # reserved(rd) = max(0, 16 - 8 - 0) = 8 -> ops: min(32, 32 - 8) = 24.
    assert avail(t, "ops") == 24
    use(t, "rd/vision", 6)
    # rd u = 6: reserved(rd) = max(0, 8 - 6) = 2 -> ops: min(32, 26 - 2) = 24.
    assert avail(t, "ops") == 24
    use(t, "rd/vision", 6)
    # rd u = 12 > exclusive 8 -> reserved 0 -> ops: 32 - 12 = 20.
    assert avail(t, "ops") == 20


def test_incremental_updates_match_a_rebuild() -> None:
    queues = [q("rd", 16, 32, lend=8), q("rd/vision", 8, 24, lend=4), q("rd/nlp", 8, 24),
              q("ops", 8, 16, lend=2)]
    t = tree(queues, 40)
    for path, amount in [("rd/vision", 5), ("ops", 3), ("rd/nlp", 12), ("rd/vision", -5),
                         ("ops", 7), ("rd/nlp", -4)]:
        use(t, path, amount)
    fresh = tree(queues, 40)
    for path, amount in [("rd/vision", 0), ("ops", 10), ("rd/nlp", 8)]:
        if amount:
            use(fresh, path, amount)
    for path in ("rd", "rd/vision", "rd/nlp", "ops"):
        assert avail(t, path) == pytest.approx(avail(fresh, path))
    for mine, theirs in zip(t.rsv_sum + t.g_sum + t.u, fresh.rsv_sum + fresh.g_sum + fresh.u,
                            strict=True):
        assert mine == pytest.approx(theirs)


def test_within_guarantee_ignores_a_siblings_borrowed_excess() -> None:
    t = tree([q("rd", 16, 32), q("rd/vision", 8, 32), q("rd/nlp", 8, 32)], 32)
    use(t, "rd/nlp", 16)  # nlp borrows 8 of vision's min inside rd
    v = t.index["rd/vision"]
    # Literal rule at rd: 16 + 8 > 16; but nlp's excess (8) can be reclaimed -> within.
    assert t.within_guarantee(v, [(0, 8)])
    assert not t.within_guarantee(v, [(0, 9)])
    use(t, "rd/vision", 4)
    assert t.within_guarantee(v, [(0, 4)])
    assert not t.within_guarantee(v, [(0, 5)])


def test_borrowing_ratio_and_attainment() -> None:
    t = tree([q("a", 8, 32), q("b", 0, 32)], 40)
    use(t, "a", 12)
    use(t, "b", 4)
    a, b = t.index["a"], t.index["b"]
    assert t.borrowing(a, 0) and t.borrow_ratio(a, 0) == pytest.approx(0.5)
    assert t.borrow_ratio(b, 0) == INF
    assert t.attainment(a, 0) == pytest.approx(1.5)
    assert t.attainment(b, 0) == 1.0
    assert t.attainment(a, None) == 1.0


def test_quota_reason_names_level_and_numbers() -> None:
    t = tree([q("rd", 16, 24), q("rd/vision", 8, 24)], 64)
    use(t, "rd/vision", 20)
    r = t.quota_reason(t.index["rd/vision"], [(0, 8)])
    assert r is not None and r.code == ReasonCode.QUOTA_MAX
    assert r.message == "queue rd/vision a100-80g/gpu: used 20 + requested 8 > max 24"


def test_quota_reason_borrow_unavailable_and_fleet() -> None:
    t = tree([q("a", 8, 32), q("b", 8, 32, lend=0)], 24)
    use(t, "a", 12)
    # a: max 32 - 12 = 20; fleet 24 - 12 = 12 minus b's reserved 8 -> 4 available.
    r = t.quota_reason(t.index["a"], [(0, 8)])
    assert r is not None and r.code == ReasonCode.QUOTA_BORROW_UNAVAILABLE
    assert "requested 8 > 4 available" in r.message and "8 held unused" in r.message
    use(t, "b", 8)
    use(t, "a", 4)
    r = t.quota_reason(t.index["a"], [(0, 8)])
    assert r is not None and r.code == ReasonCode.NO_CAPACITY
    assert "requested 8 > free 0 (capacity 24, used 24)" in r.message


def test_policy_lowered_max_is_named_and_not_static() -> None:
    t = QuotaTree([QueueSpec("a", None, {GPU: KeyQuota(8, 16, 8, max_policy="cap-a")})])
    t.set_capacity({GPU: 64})
    a = t.index["a"]
    use(t, "a", 12)
    r = t.quota_reason(a, [(0, 8)])
    assert r is not None and "max 16 (lowered by policy cap-a)" in r.message
    assert t.static_reasons(a, [(0, 32)], preemptible=True) == []
    assert t.static_reasons(a, [(0, 32)], preemptible=True, policy_aware=False)[0].code \
        == ReasonCode.QUOTA_MAX
