"""Database facts the backends need: flavors (which node is which) and priority classes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduling.backends.base import FlavorMatch, PriorityClassSpec


def match_flavor(labels: Mapping[str, str], flavors: Sequence[FlavorMatch]) -> FlavorMatch | None:
    """The flavor whose selector the labels satisfy; the most specific selector wins (ties:
    name). Flavors with an empty selector match nothing, or every node would be theirs."""
    candidates = [
        f for f in flavors
        if f.node_selector and all(labels.get(k) == str(v) for k, v in f.node_selector.items())
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda f: (-len(f.node_selector), f.name))


def load_flavor_matches() -> list[FlavorMatch]:
    """Every Flavor in the database as a FlavorMatch (imports Django lazily)."""
    from quotas.models import Flavor

    return [
        FlavorMatch(
            name=f.name,
            node_selector={str(k): str(v) for k, v in (f.node_selector or {}).items()},
            interconnect_label=f.interconnect_label,
        )
        for f in Flavor.objects.order_by("name")
    ]


def priority_classes_from_db() -> list[PriorityClassSpec]:
    """Allot's PriorityClass rows as the classes every Kubernetes cluster must hold.

    All with preemptionPolicy Never: Allot decides preemption (it suspends victims before it
    dispatches a preemptor), so the kube-scheduler must not evict Allot pods on its own.
    """
    from scheduling.models import PriorityClass

    return [
        PriorityClassSpec(
            name=pc.name, value=pc.value, description=pc.description or f"Allot {pc.name}",
            preemption_policy="Never",
        )
        for pc in PriorityClass.objects.order_by("name")
    ]
