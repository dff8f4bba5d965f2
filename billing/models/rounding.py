"""Rounding, stated once and applied everywhere: quantities to 4 decimal places, money to
cents, both ROUND_HALF_EVEN; an amount is `round(round4(quantity) * rate, 2)`."""

from decimal import ROUND_HALF_EVEN, Decimal

QUANTITY_PLACES = Decimal("0.0001")
MONEY_PLACES = Decimal("0.01")


def round_quantity(value: Decimal) -> Decimal:
    """A quantity rounded to 4 places, half-even."""
    return Decimal(value).quantize(QUANTITY_PLACES, rounding=ROUND_HALF_EVEN)


def round_money(value: Decimal) -> Decimal:
    """An amount rounded to cents, half-even."""
    return Decimal(value).quantize(MONEY_PLACES, rounding=ROUND_HALF_EVEN)
