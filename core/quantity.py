"""Kubernetes resource quantities (`2048Gi`, `500m`, `64`, `1e3`) parsed and written exactly.

The number is read by the Kubernetes client's own parser (`kubernetes.utils.quantity`); around
it, this module checks the text first (so only the forms the Kubernetes API accepts pass, each
refusal with a message naming it) and keeps Allot's units exact: gpu as whole cards, cpu in
cores and memory in GiB, each with at most 3 decimal places. A quantity that cannot be stored
exactly is refused (never rounded).

The one module besides scheduling.backends that imports the Kubernetes client (the import
contract in pyproject.toml allows exactly this import).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity as k8s_parse_quantity

_QUANTITY = re.compile(
    r"^[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE](?P<exponent>[+-]?\d+))?$"
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
    if match["exponent"] is not None and abs(int(match["exponent"])) > 30:
        raise QuantityError(f"{text!r}: exponent out of range")
    try:
        number = k8s_parse_quantity(text)
    except (ValueError, InvalidOperation) as exc:  # pragma: no cover - the regex admits these
        raise QuantityError(f"{text!r} is not a number") from exc
    # `* 1` rounds to the decimal context (28 significant digits) as the multiplication by a
    # suffix does, so every form is rounded alike.
    return number * 1


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
