"""The policies in force: the specs of given kinds that are not off, with the context variables
and the `request` fields they read.

Cached per process and kept exact by the change log (`core.changes`); where the change log is
not there, by a stamp of the policies table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core import changes

from .celexpr import fields_of, referenced_roots
from .context_rows import policy_stamp
from .models import Policy, PolicyMode
from .rules import PolicySpec
from .services import policy_to_spec

_spec_cache: dict[tuple[str, ...], tuple[Any, Any]] = {}


Active = tuple[list[PolicySpec], frozenset[str], "frozenset[str] | None"]


def _load_specs(kinds: Sequence[str]) -> Active:
    specs = [policy_to_spec(p) for p in Policy.objects.filter(kind__in=kinds).exclude(
        mode=PolicyMode.OFF)]
    sources = [src for spec in specs for src in (spec.match, spec.rule, spec.message)]
    return specs, frozenset(_needs(specs)), fields_of(sources, "request")


def in_scope(specs: Sequence[PolicySpec], path: str) -> Active:
    """Those of `specs` whose scope holds queue `path`, and what they read."""
    here = [s for s in specs if s.applies_to_path(path)]
    sources = [src for spec in here for src in (spec.match, spec.rule, spec.message)]
    return here, frozenset(_needs(here)), fields_of(sources, "request")


def active_policies(kinds: Sequence[str], view: Any) -> Active:
    """The policies of these kinds that are not off, the variables they read, and the fields
    of `request` they read (None: more than fields)."""
    key = tuple(sorted(kinds))
    if view is not None:
        return view.get("policy", ("specs", key), lambda: _load_specs(key))
    # Without the change log (off PostgreSQL, or migration 0002 not applied): a one-row stamp
    # (count, versions, last change, last id) guards the cache.
    from django.db.models import Count, Max, Sum  # noqa: PLC0415

    stamp: Any = policy_stamp()
    if stamp is None:
        stamp = tuple(Policy.objects.aggregate(n=Count("id"), v=Sum("version"),
                                               at=Max("updated_at"), last=Max("id")).values())
    cached = _spec_cache.get(key)
    if cached is None or cached[0] != stamp:
        cached = _spec_cache[key] = (stamp, _load_specs(key))
    return cached[1]  # type: ignore[no-any-return]


def active_specs(kinds: Sequence[str]) -> list[PolicySpec]:
    """The policies of these kinds that are not off.

    Cached per process and kept exact by the change log (`changes`): a change saved anywhere
    takes effect on the next submission or cycle.
    """
    return active_policies(kinds, changes.validate())[0]


def _needs(specs: Sequence[PolicySpec]) -> set[str]:
    """The context variables these policies read."""
    needs: set[str] = set()
    for spec in specs:
        for src in (spec.match, spec.rule, spec.message):
            needs |= referenced_roots(src)
    return needs
