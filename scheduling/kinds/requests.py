"""A pod's requests as the Kubernetes scheduler counts them, from a pod template (plain JSON),
and the error a manifest Allot cannot run raises."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from core.quantity import QuantityError, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"


class ManifestError(ValueError):
    """A manifest Allot cannot run: names the kind, the field path and the problem."""

    def __init__(self, kind: str, path: str, problem: str):
        super().__init__(f"{kind}: {path}: {problem}")
        self.kind, self.path, self.problem = kind, path, problem



def container_requests(kind: str, container: Any, path: str) -> dict[str, Decimal]:
    """A container's requests: each resource's request, else its limit (as Kubernetes
    defaults a missing request to the limit)."""
    if not isinstance(container, Mapping):
        raise ManifestError(kind, path, "expected a container object")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ManifestError(kind, f"{path}.resources", "expected an object")
    out: dict[str, Decimal] = {}
    for section in ("limits", "requests"):  # requests win over limits
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise ManifestError(kind, f"{path}.resources.{section}", "expected an object")
        for name, raw in values.items():
            try:
                amount = parse_quantity(raw)
            except QuantityError as exc:
                raise ManifestError(kind, f"{path}.resources.{section}.{name}",
                                    f"{raw!r} is not a quantity ({exc})") from exc
            if amount < 0:
                raise ManifestError(kind, f"{path}.resources.{section}.{name}",
                                    f"{raw!r} is negative")
            out[str(name)] = amount
    return out


def pod_requests(kind: str, template: Any, path: str) -> dict[str, Decimal]:
    """A pod's requests as the scheduler counts them: the containers summed; init containers
    run one at a time before them, so each resource is the larger of the largest init
    container and the containers' sum; sidecars (init containers with restartPolicy Always)
    keep running, so they add to both (as they start, to the init containers after them)."""
    if not isinstance(template, Mapping):
        raise ManifestError(kind, path, "expected a pod template object")
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise ManifestError(kind, f"{path}.spec", "required: the pod spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError(kind, f"{path}.spec.containers", "no containers: at least one")
    total: dict[str, Decimal] = {}
    for i, c in enumerate(containers):
        for name, amount in container_requests(kind, c, f"{path}.spec.containers[{i}]").items():
            total[name] = total.get(name, Decimal(0)) + amount
    inits = spec.get("initContainers") or []
    if not isinstance(inits, list):
        raise ManifestError(kind, f"{path}.spec.initContainers", "expected a list")
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for i, c in enumerate(inits):
        asks = container_requests(kind, c, f"{path}.spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            for name, amount in asks.items():
                sidecars[name] = sidecars.get(name, Decimal(0)) + amount
            continue
        for name, amount in asks.items():  # this init container runs beside earlier sidecars
            init_peak[name] = max(init_peak.get(name, Decimal(0)),
                                  amount + sidecars.get(name, Decimal(0)))
    out: dict[str, Decimal] = {}
    for name in {*total, *sidecars, *init_peak}:
        running = total.get(name, Decimal(0)) + sidecars.get(name, Decimal(0))
        out[name] = max(running, init_peak.get(name, Decimal(0)))
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        for name, raw in overhead.items():
            try:
                out[str(name)] = out.get(str(name), Decimal(0)) + parse_quantity(raw)
            except QuantityError as exc:
                raise ManifestError(kind, f"{path}.spec.overhead.{name}",
                                    f"{raw!r} is not a quantity ({exc})") from exc
    if GPU_RESOURCE in out and out[GPU_RESOURCE] != out[GPU_RESOURCE].to_integral_value():
        raise ManifestError(kind, f"{path}.spec.containers", f"{GPU_RESOURCE} "
                            f"{out[GPU_RESOURCE]} is not a whole number of cards (a share of one "
                            "card: the pod annotation gpu-fraction, or HAMi's "
                            "nvidia.com/gpucores)")
    return out
