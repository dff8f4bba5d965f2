"""Flavor writes: a GPU model (or other node shape) the tree's quotas are set for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas.models import Flavor
from quotas.services.tree import (
    FLAVOR_FIELDS,
    _check_name,
)


def _check_flavor_fields(data: Mapping[str, Any]) -> None:
    # Labels are checked by Flavor.clean (in full_clean), as in the admin's forms.
    gpu_mem = data.get("gpu_memory_gib")
    if gpu_mem is not None and (isinstance(gpu_mem, bool) or not isinstance(gpu_mem, int)
                                or gpu_mem <= 0):
        raise ValidationError(f"gpu_memory_gib {gpu_mem!r} must be a positive whole number")


@transaction.atomic
def flavor_create(*, name: str, **fields: Any) -> Flavor:
    """Register a flavor (a class of node) by name and node labels."""
    _check_name(name, "flavor name")
    if Flavor.objects.filter(name=name).exists():
        raise ValidationError(f"flavor {name!r} already exists")
    unknown = set(fields) - set(FLAVOR_FIELDS)
    if unknown:
        raise ValidationError(f"unknown flavor field(s): {', '.join(sorted(unknown))}")
    _check_flavor_fields(fields)
    flavor = Flavor(name=name, **fields)
    flavor.full_clean()
    flavor.save()
    return flavor


@transaction.atomic
def flavor_update(*, flavor: Flavor, **fields: Any) -> Flavor:
    """Change a flavor's labels or facts (its name is fixed: quotas refer to it)."""
    unknown = set(fields) - set(FLAVOR_FIELDS)
    if unknown:
        raise ValidationError(f"unknown flavor field(s): {', '.join(sorted(unknown))}")
    _check_flavor_fields({"node_selector": flavor.node_selector, **fields})
    fields = {n: v for n, v in fields.items() if getattr(flavor, n) != v}
    if not fields:
        return flavor  # nothing changed: no save, no row in its history
    for name, value in fields.items():
        setattr(flavor, name, value)
    flavor.full_clean()
    flavor.save()
    return flavor
