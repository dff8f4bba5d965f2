"""Kubernetes resource quantities (`2048Gi`, `500m`, `64`, `1e3`) parsed and written exactly.

Allot stores gpu as whole cards, cpu in cores and memory in GiB, each with at most 3 decimal
places; a quantity that cannot be stored exactly is refused (never rounded).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)
GIB = Decimal(2**30)
STEP = Decimal("0.001")
MAX_TEXT = 64
LIMIT = Decimal("1e11")


class QuantityError(ValueError):
    """A quantity that is malformed or cannot be stored exactly."""


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity as an exact Decimal in base units (bytes, cores, cards)."""
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{type(value).__name__} is not a quantity")
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise QuantityError(f"quantity {text[:20]!r}... is too long")
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (like 64, 500m, 2048Gi)")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits numbers only
        raise QuantityError(f"{text!r} is not a number") from exc
    suffix = match["suffix"] or ""
    if suffix in BINARY:
        return number * BINARY[suffix]
    if suffix in DECIMAL:
        return number * DECIMAL[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise QuantityError(f"{text!r}: exponent out of range")
    return number.scaleb(exponent)


def _stored(amount: Decimal, text: str, unit: str) -> Decimal:
    if amount < 0:
        raise QuantityError(f"{text} is negative")
    if amount >= LIMIT:
        raise QuantityError(f"{text} is too large (at most {LIMIT - STEP} {unit})")
    if amount != amount.quantize(STEP):
        raise QuantityError(f"{text} = {amount.normalize():f} {unit} cannot be stored exactly "
                            "(at most 3 decimal places)")
    return amount.quantize(STEP)


def to_amount(resource: str, value: object) -> Decimal:
    """A quantity in Allot's unit for the resource: gpu cards, cpu cores, memory GiB."""
    text = value if isinstance(value, str) else repr(value)
    base = parse_quantity(value)
    if resource == "memory":
        return _stored(base / GIB, text, "GiB")
    if resource == "gpu":
        if base != base.to_integral_value():
            raise QuantityError(f"{text}: GPUs are whole cards")
        return _stored(base, text, "GPUs")
    return _stored(base, text, "cores")


def format_quantity(resource: str, amount: Decimal | int) -> str:
    """Allot's amount as a Kubernetes quantity: `2048Gi`, `512Mi`, `500m`, `8`."""
    amount = Decimal(amount)
    if resource == "memory":
        if amount == amount.to_integral_value():
            return f"{int(amount)}Gi"
        mib = amount * 1024
        if mib == mib.to_integral_value():
            return f"{int(mib)}Mi"
        return f"{amount.normalize():f}Gi"
    if amount == amount.to_integral_value():
        return str(int(amount))
    milli = amount * 1000
    return f"{int(milli)}m"
