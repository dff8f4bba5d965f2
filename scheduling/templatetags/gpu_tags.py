"""GPUs as people read them in pages: `8`, `0.25` (a fraction of one card)."""

from __future__ import annotations

from decimal import Decimal

from django import template

from scheduling.request.validation import gpus_shown

register = template.Library()


@register.filter
def gpus(value: Decimal | float | int | None) -> str:
    """`8.000` -> `8`, `0.250` -> `0.25`; empty for None."""
    if value is None or value == "":
        return ""
    return str(gpus_shown(value))
