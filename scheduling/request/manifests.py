"""A submission from a manifest: the object's kind found, its pod sets derived (counts and
per-pod requests), checked against a submission's limits, every problem named with the kind
and the field path."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from core.quantity import QuantityError, resource_name_problem, to_base
from scheduling import kinds
from scheduling.kinds import DerivedPodSet, ManifestError
from scheduling.kinds.sharing import gpus_shown


def derived_pods_data(sets: list[DerivedPodSet]) -> list[dict[str, Any]]:
    """What the API shows of derived pod sets: name, count, where in the manifest, requests
    (every resource, as exact amounts: cores, GiB, cards, else the resource's own unit)."""
    out = []
    for s in sets:
        # A fraction as people read it (0.5); a memory slice alone: null (its fraction is
        # counted on the flavor's cards, `pod_sets`), with the slice in `gpu_memory_mib`.
        gpus = None if s.shared and s.gpu_fraction is None else gpus_shown(s.gpus)
        requests: dict[str, Any] = {"cpu": s.cpu, "memory_gib": s.memory_gib, "gpus": gpus}
        if s.gpu_memory_mib is not None:
            requests["gpu_memory_mib"] = s.gpu_memory_mib
        requests.update({k: v.normalize() for k, v in sorted(s.other.items())})
        out.append({"name": s.name, "count": s.count, "path": s.path, "requests": requests})
    return out


def _card_gib(flavors: list[str], known_flavors: Mapping[str, Any]) -> int | None:
    """The smallest memory per card among `flavors` (where it is known): a memory slice's
    fraction is counted on it, so it fits every acceptable flavor's cards."""
    sizes = [int(getattr(known_flavors[f], "gpu_memory_gib", None) or 0) for f in flavors
             if f in known_flavors]
    sizes = [g for g in sizes if g > 0]
    return min(sizes) if sizes else None


def _compatible(flavor: Any, sets: list[DerivedPodSet]) -> bool:
    """A flavor whose node selector does not contradict any pod template's."""
    selector = flavor.node_selector or {}
    for s in sets:
        wanted = (s.template.get("spec") or {}).get("nodeSelector") or {}
        if any(k in selector and str(selector[k]) != str(v) for k, v in wanted.items()):
            return False
    return True


def validate_manifest(data: Mapping[str, Any], known_flavors: Mapping[str, Any],
                      errors: dict[str, list[str]], *, limits: Mapping[str, Any]
                      ) -> dict[str, Any]:
    """`kind` (apiVersion/Kind), `manifest`, `pods` (as a submission's) and `derived` of a
    manifest submission; problems go to `errors` (keys `manifest...`, `flavors`). `limits`:
    a submission's `pod_sets`, `pods`, `gpus`, `cpu` and `memory_gib` at most."""
    manifest: Any = data.get("manifest")
    out: dict[str, Any] = {"kind": "", "manifest": {}, "pods": [], "derived": []}
    for field in ("pods", "image", "command"):
        if data.get(field):
            errors.setdefault(field, []).append(
                "give either a manifest or pods/image/command, not both")
    try:
        size = len(json.dumps(manifest))
    except (TypeError, ValueError):
        size = 0
    if size > kinds.MAX_MANIFEST_BYTES:
        errors["manifest"] = [f"{size} bytes > {kinds.MAX_MANIFEST_BYTES}: too large"]
        return out
    try:
        kind = kinds.kind_of(manifest)
        sets = kind.derive(dict(manifest))
    except ManifestError as exc:
        key = "manifest" if exc.path in ("manifest",) else f"manifest.{exc.path}"
        errors.setdefault(key, []).append(f"{exc.kind}: {exc.problem}")
        return out
    out["kind"], out["manifest"], out["derived"] = kind.key, dict(manifest), sets
    if len(sets) > limits["pod_sets"]:
        errors.setdefault("manifest", []).append(
            f"{kind.kind}: {len(sets)} pod sets > {limits['pod_sets']}")
    for s in sets:
        where = f"manifest.{s.path}"
        for label, value, limit in (("pods", s.count, limits["pods"]),
                                    ("GPUs per pod", s.gpus, limits["gpus"]),
                                    ("cpu per pod", s.cpu, limits["cpu"]),
                                    ("memory GiB per pod", s.memory_gib, limits["memory_gib"])):
            if value > limit:
                errors.setdefault(where, []).append(
                    f"{kind.kind}: {value} {label} > {limit}: at most {limit}")
        if s.gpus == 0 and not s.shared and s.cpu <= 0 and s.memory_gib <= 0 and not s.other:
            errors.setdefault(where, []).append(
                f"{kind.kind}: pod set {s.name!r} asks for nothing: give its containers "
                "resource requests (cpu, memory or nvidia.com/gpu)")
    flavors = data.get("flavors")
    if flavors is not None:
        if not isinstance(flavors, list) or not flavors or not all(
                isinstance(f, str) for f in flavors):
            errors.setdefault("flavors", []).append(
                "acceptable flavors in order of preference, e.g. [\"a100-80g\"]")
            flavors = []
        unknown = [f for f in flavors if f not in known_flavors]
        if unknown:
            errors.setdefault("flavors", []).append(
                f"unknown flavor(s) {', '.join(unknown)} (known: "
                f"{', '.join(sorted(known_flavors))})")
    else:
        flavors = [name for name, f in known_flavors.items() if _compatible(f, sets)]
        if not flavors:
            errors.setdefault("flavors", []).append(
                f"{kind.kind}: no flavor matches the manifest's nodeSelector: name flavors")
    card_gib = _card_gib(list(flavors), known_flavors)
    pods = []
    for i, s in enumerate(sets):
        try:
            gpus, gpu_memory_gib = s.counted(card_gib)
        except ValueError as exc:
            errors.setdefault(f"manifest.{s.share_path}", []).append(f"{kind.kind}: {exc}")
            gpus, gpu_memory_gib = Decimal(0), None
        pods.append(
            {"index": i, "count": s.count, "flavors": list(flavors), "gpus": gpus,
             "cpu": s.cpu, "memory_gib": s.memory_gib, "gpu_memory_gib": gpu_memory_gib,
             # Resources other than cpu, memory and whole GPUs (MIG slices, ...), by their
             # Kubernetes names, as exact integers of each one's base unit (as
             # `pods[i].resources`).
             "resources": _extended(kind.kind, i, s.other, errors)})
    out["pods"] = pods
    return out


def _extended(kind: str, index: int, other: Mapping[str, Any],
              errors: dict[str, list[str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in sorted(other.items()):
        problem = resource_name_problem(name)
        try:
            base = 0 if problem else to_base(name, format(value, "f"))
        except QuantityError as exc:
            problem = str(exc)
        if problem:
            errors.setdefault(f"manifest.pods[{index}].{name}", []).append(f"{kind}: {problem}")
        elif base:
            out[name] = base
    return out


def gang_manifests(kind_key: str, manifest: Any, pods: list[dict[str, Any]]
                   ) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """A manifest split into its kind's independent gangs (a LeaderWorkerSet's replica
    groups): each gang's manifest with its pod sets (`pods` with each gang's counts). One
    gang (most kinds): the manifest and `pods` as they are."""
    kind = kinds.kind_named(kind_key) if kind_key else None
    if kind is None or kind.gangs_fn is None or not isinstance(manifest, dict):
        return [(manifest, pods)]
    manifests = kind.gangs(manifest)
    if len(manifests) == 1:
        return [(manifest, pods)]
    return [(m, [{**p, "count": s.count} for p, s in zip(pods, kind.derive(m), strict=True)])
            for m in manifests]


def manifest_name(manifest: Any) -> Any:
    """The manifest's own name (a submission's default name)."""
    if isinstance(manifest, Mapping) and isinstance(manifest.get("metadata"), Mapping):
        return manifest["metadata"].get("name")
    return None

