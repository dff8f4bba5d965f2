"""Kubernetes resource quantities (`2048Gi`, `500m`, `64`, `1e3`) parsed and written exactly.

The number is read by the Kubernetes client's own parser (`kubernetes.utils.quantity`); around
it, this module checks the text first (so only the forms the Kubernetes API accepts pass, each
refusal with a message naming it) and keeps Allot's units exact: gpu as whole cards, cpu in
cores and memory in GiB (QUOTA-SEMANTICS.md §10: resources are open, quantities exact).

Every resource has a base unit, and an amount is stored as an integer of it (`to_base`):
bytes for memory-like resources (`memory`, `ephemeral-storage`, `hugepages-2Mi`, any name with
`memory` or `storage` in it), thousandths for everything else (millicores of `cpu`, thousandths
of a card of `gpu`, thousandths of an extended resource such as `nvidia.com/mig-1g.10gb`).
Allot's amounts (`to_amount`) are exact Decimals in the unit people read: GiB for memory-like
resources, cores, cards, and the count of an extended resource. A quantity finer than the base
unit is refused (never rounded).

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
MILLI = 1000
MAX_TEXT = 64
MAX_BYTES = 2**62
LIMIT = Decimal("1e11")  # in Allot's unit (GiB, cores, cards, count)
# Kubernetes resource names: an optional DNS-subdomain prefix and a name of at most 63 chars.
_NAME = re.compile(r"^(?:(?P<prefix>[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                   r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?"
                   r"(?P<name>[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_PLAIN = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)$")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20),
           ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6),
            ("k", 10**3))


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


def resource_name_problem(name: object) -> str | None:
    """Why `name` is not a Kubernetes resource name (None when it is one)."""
    if not isinstance(name, str) or not name:
        return f"resource name {name!r} is not a non-empty string"
    match = _NAME.match(name)
    if match is None or len(match["name"]) > 63 or len(name) > 253:
        return (f"resource name {name!r} is not a Kubernetes resource name (like cpu, "
                "nvidia.com/mig-1g.10gb, example.com/foo)")
    return None


def is_bytes(resource: str) -> bool:
    """Whether the resource is counted in bytes (memory-like) rather than in thousandths."""
    name = resource.rsplit("/", 1)[-1].lower()
    return (resource == "memory" or name.startswith("hugepages-") or "memory" in name
            or "storage" in name)


def unit(resource: str) -> str:
    """The unit Allot shows the resource in: GiB, cores, GPUs, or "" (a count)."""
    if is_bytes(resource):
        return "GiB"
    return {"cpu": "cores", "gpu": "GPUs"}.get(resource, "")


def _base_per_amount(resource: str) -> int:
    return 2**30 if is_bytes(resource) else MILLI


def _text(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def _checked(resource: str, base: Decimal, text: str) -> int:
    """`base` (a quantity in base units) as an integer, or the reason it cannot be stored."""
    shown = unit(resource) or resource
    if base < 0:
        raise QuantityError(f"{text} is negative")
    per = _base_per_amount(resource)
    # The database keeps a 64-bit integer: bytes stop at 4 EiB (4,294,967,296 GiB).
    ceiling = Decimal(MAX_BYTES) if is_bytes(resource) else LIMIT * per
    if base >= ceiling:
        raise QuantityError(f"{text} is too large (below {(ceiling / per).normalize():f} "
                            f"{shown})")
    if base != base.to_integral_value():
        if is_bytes(resource):
            raise QuantityError(f"{text} is not a whole number of bytes")
        raise QuantityError(f"{text} has more than 3 decimal places")
    return int(base)


def to_base(resource: str, value: object) -> int:
    """A quantity as an exact integer of the resource's base unit (bytes or thousandths).

    `gpu` quantities are whole cards (`gpus: 0.25` on a pod is the pod's business, not a
    quota's)."""
    text = _text(value)
    number = parse_quantity(value)
    if resource == "gpu" and number != number.to_integral_value():
        raise QuantityError(f"{text}: GPUs are whole cards")
    return _checked(resource, number if is_bytes(resource) else number * MILLI, text)


def amount_to_base(resource: str, amount: Decimal | int | float) -> int:
    """Allot's amount (GiB, cores, cards, count) as an exact integer of the base unit."""
    value = Decimal(repr(amount)) if isinstance(amount, float) else Decimal(amount)
    return _checked(resource, value * _base_per_amount(resource), f"{value.normalize():f}")


def nearest_base(resource: str, amount: Decimal) -> int:
    """An amount (Allot's unit, possibly rounded for display) as the nearest base integer."""
    return int((Decimal(amount) * _base_per_amount(resource)).to_integral_value())


def base_to_amount(resource: str, base: int) -> Decimal:
    """An integer of the base unit as Allot's amount: an exact Decimal (GiB, cores, count)."""
    per = _base_per_amount(resource)
    amount = Decimal(int(base)) / per if per == MILLI else _exact_div(int(base), per)
    return amount.normalize() if amount != amount.to_integral_value() else Decimal(int(amount))


def _exact_div(base: int, per: int) -> Decimal:
    # Bytes / 2**30 has a finite decimal expansion of at most 30 places: compute it exactly.
    whole, rest = divmod(base, per)
    return Decimal(whole) + (Decimal(rest * 10**30 // per) / Decimal(10) ** 30)


def to_amount(resource: str, value: object) -> Decimal:
    """A quantity in Allot's unit for the resource: GiB, cores, cards, a count (exact)."""
    return base_to_amount(resource, to_base(resource, value))


def read_amount(resource: str, value: object) -> Decimal:
    """What a person types for an amount: a plain number is in Allot's unit (`1.5` GiB of
    memory, `0.5` cores), a Kubernetes quantity with a suffix is converted (`4G`, `500m`,
    `2048Gi`); either must be exact in the base unit."""
    if isinstance(value, str):
        text = value.strip()
        if _PLAIN.match(text):
            value = Decimal(text)
        else:
            return to_amount(resource, text)
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise QuantityError(f"{value!r} is not a quantity")
    number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not number.is_finite():
        raise QuantityError(f"{value!r} is not a finite number")
    if resource == "gpu" and number != number.to_integral_value():
        raise QuantityError(f"{number.normalize():f}: GPUs are whole cards")
    amount_to_base(resource, abs(number))  # (a negative number is the tree rules' to name)
    return number


def amounts(bases: object) -> dict[str, Decimal]:
    """A stored mapping of resource -> base-unit integer as exact amounts (bad entries are
    dropped: the column is written by the node sync only)."""
    if not isinstance(bases, dict):
        return {}
    return {str(k): base_to_amount(str(k), int(v)) for k, v in bases.items()
            if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def equivalents(raw: object) -> dict[str, float]:
    """A flavor's stored `gpu_equivalents` (resource -> cards per unit) as numbers."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0}


def resource_quantities(bases: object) -> dict[str, str]:
    """A stored mapping of resource -> base-unit integer as Kubernetes quantities."""
    return {name: format_base(name, int(base)) for name, base in sorted(
        (bases if isinstance(bases, dict) else {}).items())}


_MIG = re.compile(r"(?:^|/)mig-(\d+)g\.")


def card_equivalent(resource: str, equivalents: object = None) -> Decimal:
    """What one unit of `resource` is worth in cards: the flavor's `gpu_equivalents` entry,
    else N/7 for a MIG slice `mig-Ng.*`, else 0 (`gpu`: 1)."""
    if resource == "gpu":
        return Decimal(1)
    if isinstance(equivalents, dict) and resource in equivalents:
        value = equivalents[resource]
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    match = _MIG.search(resource)
    return Decimal(int(match.group(1))) / 7 if match else Decimal(0)


def format_base(resource: str, base: int) -> str:
    """An integer of the base unit as the shortest exact Kubernetes quantity: `2048Gi`, `4G`,
    `100Mi`, `500m`, `8`. Binary suffixes stop at Gi for memory (people write `2048Gi`)."""
    base = int(base)
    if is_bytes(resource):
        if base == 0:
            return "0"
        best = str(base)
        for suffix, size in (*_BINARY[3:], *_DECIMAL):
            if base % size == 0:
                text = f"{base // size}{suffix}"
                if len(text) < len(best):
                    best = text
        return best
    if base % MILLI == 0:
        return str(base // MILLI)
    return f"{base}m"


def format_quantity(resource: str, amount: Decimal | int) -> str:
    """Allot's amount as a Kubernetes quantity: `2048Gi`, `512Mi`, `4G`, `500m`, `8`."""
    return format_base(resource, amount_to_base(resource, amount))


def display(resource: str, amount: Decimal | int | float) -> str:
    """An amount as people read it: `3.73 GiB`, `0.5 cores`, `8 GPUs`, `7`."""
    value = Decimal(repr(amount)) if isinstance(amount, float) else Decimal(amount)
    if value == value.to_integral_value():
        text = str(int(value))
    else:
        text = f"{value:.3f}".rstrip("0").rstrip(".")
        if value != Decimal(text):
            text = f"{value:.6g}"
    shown = unit(resource)
    return f"{text} {shown}" if shown else text
