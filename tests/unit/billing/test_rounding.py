"""Rounding: quantities to 4 places and money to cents, both half-even."""

from decimal import Decimal

from billing.models import round_money, round_quantity


def test_rounding_is_half_even():
    assert round_quantity(Decimal("1.33335")) == Decimal("1.3334")
    assert round_quantity(Decimal("1.33345")) == Decimal("1.3334")
    assert round_money(Decimal("0.125")) == Decimal("0.12")
    assert round_money(Decimal("0.135")) == Decimal("0.14")
