"""The tree's "lent": a group's borrowed total attributed to its idle siblings, in proportion
to their idle lendable part, whole units, largest remainders, deterministic."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from scheduling.selectors import lent_shares

D = Decimal


def test_equal_idle_siblings_share_the_loan_and_the_path_breaks_the_tie():
    idle = {"rd/nlp": D(8), "rd/speech": D(8), "rd/audio": D(8), "rd/vision": D(0)}
    assert lent_shares(idle, D(4)) == {
        "rd/audio": D(2), "rd/nlp": D(1), "rd/speech": D(1), "rd/vision": D(0)}


def test_shares_follow_the_idle_part_and_never_exceed_it():
    idle = {"a": D(12), "b": D(4), "c": D(0)}
    assert lent_shares(idle, D(8)) == {"a": D(6), "b": D(2), "c": D(0)}
    # More borrowed than the siblings' idle parts: each lends its whole idle part.
    assert lent_shares(idle, D(40)) == {"a": D(12), "b": D(4), "c": D(0)}
    assert lent_shares(idle, D(0)) == {"a": D(0), "b": D(0), "c": D(0)}


def test_a_larger_idle_part_wins_an_equal_remainder():
    # 3 over idle 6 and 3 (pool 9): exact 2 and 1, whole, nothing left over.
    assert lent_shares({"a": D(6), "b": D(3)}, D(3)) == {"a": D(2), "b": D(1)}
    # 1 over idle 2 and 2: 0.5 each, the path decides; over 3 and 1: 0.75 vs 0.25.
    assert lent_shares({"b": D(2), "a": D(2)}, D(1)) == {"a": D(1), "b": D(0)}
    assert lent_shares({"a": D(1), "b": D(3)}, D(1)) == {"a": D(0), "b": D(1)}


def test_fractional_amounts_share_in_thousandths():
    out = lent_shares({"a": D("0.5"), "b": D("0.5"), "c": D("0.5")}, D(1))
    assert sum(out.values()) == D(1)
    assert out == {"a": D("0.334"), "b": D("0.333"), "c": D("0.333")}


@given(st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=6),
       st.integers(min_value=0, max_value=200))
def test_lent_adds_up_to_what_is_borrowed_from_the_siblings(parts, borrowed):
    idle = {f"q{i}": D(p) for i, p in enumerate(parts)}
    out = lent_shares(idle, D(borrowed))
    assert sum(out.values()) == min(D(borrowed), sum(idle.values()))
    assert all(D(0) <= out[k] <= idle[k] for k in idle)
    assert all(v == v.to_integral_value() for v in out.values())
    assert out == lent_shares(dict(reversed(list(idle.items()))), D(borrowed))
