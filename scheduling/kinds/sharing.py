"""A share of one card, asked in a manifest the way the pods' GPU sharing mechanism reads it
(KAI Scheduler's pod annotations, HAMi's container resources), and the fraction and memory
slice Allot counts for it on a flavor's cards. scheduling/backends/k8s/jobs.py writes the same
fields for a fraction Allot places."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from scheduling.kinds.requests import GPU_RESOURCE, ManifestError, container_requests

# KAI Scheduler's pod annotations; HAMi's container resources (with `nvidia.com/gpu: 1`).
KAI_FRACTION = "gpu-fraction"  # a fraction of one card, "0.5"
KAI_MEMORY = "gpu-memory"  # a memory slice of one card, in MiB
HAMI_CORES = "nvidia.com/gpucores"  # percent of the card's compute
HAMI_MEMORY = "nvidia.com/gpumem"  # a memory slice, in MiB
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"  # percent of the card's memory
HAMI_RESOURCES = (HAMI_CORES, HAMI_MEMORY, HAMI_MEMORY_PERCENT)
GPU_STEP = Decimal("0.001")  # a fraction of a card, in thousandths
MIB_PER_GIB = 1024


def gpus_shown(value: Decimal | float | int) -> int | float:
    """GPUs as people read them: 8, 0.25 (a JSON number, no trailing zeros)."""
    number = Decimal(str(value))
    return int(number) if number == number.to_integral_value() else float(number.normalize())


def _fraction(kind: str, raw: Any, path: str) -> Decimal:
    """A fraction of one card: 0 < f < 1 in steps of 0.001."""
    try:
        f = Decimal(str(raw).strip()) if isinstance(raw, str | int | float) \
            and not isinstance(raw, bool) else Decimal("NaN")
    except InvalidOperation:
        f = Decimal("NaN")
    if not f.is_finite():
        raise ManifestError(kind, path, f"{raw!r} is not a number: a fraction of one card "
                            "such as \"0.5\"")
    if not Decimal(0) < f < 1:
        raise ManifestError(kind, path, f"{f} is not a fraction of one card (0 < f < 1; "
                            f"whole cards are {GPU_RESOURCE})")
    if f != f.quantize(GPU_STEP):
        raise ManifestError(kind, path, f"{f}: a fraction of a card is in steps of 0.001")
    return f


def _whole(kind: str, raw: Any, path: str, what: str, *, maximum: int | None = None) -> int:
    """A positive whole number (`what`: its unit), at most `maximum`."""
    try:
        n = Decimal(str(raw).strip()) if isinstance(raw, str | int | Decimal) \
            and not isinstance(raw, bool) else Decimal("NaN")
    except InvalidOperation:
        n = Decimal("NaN")
    if not n.is_finite() or n != n.to_integral_value():
        raise ManifestError(kind, path, f"{raw!r} is not a whole number of {what}")
    if n < 1 or (maximum is not None and n > maximum):
        top = f"..{maximum}" if maximum is not None else " or more"
        raise ManifestError(kind, path, f"{n} is out of range (1{top} {what})")
    return int(n)


def _resource_path(container: Mapping[str, Any], cpath: str, name: str) -> str:
    """Where a container asks `name`: its request, else its limit."""
    resources = container.get("resources") or {}
    section = "requests" if name in (resources.get("requests") or {}) else "limits"
    return f"{cpath}.resources.{section}.{name}"


def gpu_share(kind: str, template: Mapping[str, Any], path: str,
              requests: Mapping[str, Decimal]) -> dict[str, Any]:
    """A share of one card asked the way a GPU sharing mechanism reads it, as DerivedPodSet
    fields (none: {}): KAI Scheduler's pod annotation `gpu-fraction` (a fraction) or
    `gpu-memory` (a slice in MiB), with no `nvidia.com/gpu`; HAMi's `nvidia.com/gpucores`
    (percent: the fraction), `nvidia.com/gpumem` (a slice in MiB) or
    `nvidia.com/gpumem-percentage` on one container asking `nvidia.com/gpu: 1` (HAMi's default
    when left out). 100 percent of a card's compute is the whole card (`requests` then
    carries it)."""
    meta = template.get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    annotations = annotations if isinstance(annotations, Mapping) else {}
    spec = template.get("spec") or {}
    hami: list[tuple[int, str, dict[str, Decimal]]] = []
    for section in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(section) or []):
            cpath = f"{path}.spec.{section}[{i}]"
            asks = container_requests(kind, c, cpath)
            named = [n for n in HAMI_RESOURCES if n in asks]
            if not named:
                continue
            if section == "initContainers":
                raise ManifestError(kind, _resource_path(c, cpath, named[0]),
                                    "a share of a card is asked by a container, not an init "
                                    "container")
            hami.append((i, cpath, asks))
    kai = [n for n in (KAI_FRACTION, KAI_MEMORY) if n in annotations]
    whole = int(requests.get(GPU_RESOURCE, 0))
    if kai:
        at = f"{path}.metadata.annotations.{kai[0]}"
        if len(kai) > 1:
            raise ManifestError(kind, f"{path}.metadata.annotations", f"both {KAI_FRACTION} "
                                f"and {KAI_MEMORY}: KAI takes one of them")
        asked: dict[str, Any]
        if kai[0] == KAI_FRACTION:
            asked = {"gpu_fraction": _fraction(kind, annotations[KAI_FRACTION], at)}
        else:
            asked = {"gpu_memory_mib": _whole(kind, annotations[KAI_MEMORY], at, "MiB")}
        if hami:
            raise ManifestError(kind, at, f"with {hami[0][1]} asking HAMi's {HAMI_CORES}/"
                                f"{HAMI_MEMORY}: one sharing mechanism per pod")
        if whole:
            raise ManifestError(kind, at, f"with {GPU_RESOURCE} {whole} in the containers: a "
                                f"KAI share asks no {GPU_RESOURCE}; drop it (or the annotation "
                                "for whole cards)")
        return {**asked, "share_path": at}
    if not hami:
        return {}
    containers = spec.get("containers") or []
    i, cpath, asks = hami[0]
    if len(hami) > 1:
        raise ManifestError(kind, f"{hami[1][1]}.resources", f"a second container asking a "
                            f"share of a card ({cpath} asks one): one per pod")
    others = [j for j, c in enumerate(containers) if j != i
              and GPU_RESOURCE in container_requests(kind, c, f"{path}.spec.containers[{j}]")]
    if others:
        raise ManifestError(kind, f"{path}.spec.containers[{others[0]}].resources",
                            f"asks {GPU_RESOURCE} beside {cpath}'s share of a card: a pod "
                            "asks whole cards or one share")
    cards = asks.get(GPU_RESOURCE, Decimal(1))
    if cards != 1:
        raise ManifestError(kind, _resource_path(containers[i], cpath, GPU_RESOURCE),
                            f"{cards} cards with {HAMI_CORES}/{HAMI_MEMORY}: a share is of one "
                            f"card ({GPU_RESOURCE}: 1)")
    c = containers[i]

    def percent(name: str) -> int | None:
        if name not in asks:
            return None
        return _whole(kind, asks[name], _resource_path(c, cpath, name), "percent",
                      maximum=100)

    cores, memory_percent = percent(HAMI_CORES), percent(HAMI_MEMORY_PERCENT)
    mib = None
    if HAMI_MEMORY in asks:
        mib = _whole(kind, asks[HAMI_MEMORY], _resource_path(c, cpath, HAMI_MEMORY), "MiB")
        if memory_percent is not None:
            raise ManifestError(kind, _resource_path(c, cpath, HAMI_MEMORY_PERCENT),
                                f"with {HAMI_MEMORY}: give the slice one way")
    at = f"{cpath}.resources"
    if cores == 100 or (cores is None and memory_percent == 100):
        return {"requests": {**requests, GPU_RESOURCE: Decimal(1)}}  # the whole card
    fraction = Decimal(cores) / 100 if cores is not None else None
    share = Decimal(memory_percent) / 100 if memory_percent is not None else None
    if fraction is None and mib is None:
        fraction, share = share, None
    return {"gpu_fraction": fraction, "gpu_memory_mib": mib, "gpu_memory_share": share,
            "share_path": at}


def counted_share(*, fraction: Decimal | None, memory_mib: int | None,
                  memory_share: Decimal | None, card_gib: Decimal | int | None
                  ) -> tuple[Decimal, int | None]:
    """The fraction of a card and the memory slice in whole GiB (None: the fraction's share
    of the card) Allot counts for a share on cards of `card_gib` GiB (None: not known). A
    slice alone is the fraction slice / card, rounded up to 0.001; ValueError when that
    cannot be told (card memory unknown) or is not a fraction (a slice of the whole card)."""
    slice_gib: int | None = None
    if memory_mib is not None:
        slice_gib = -(-memory_mib // MIB_PER_GIB)
    elif memory_share is not None and card_gib and memory_share != fraction:
        slice_gib = int((memory_share * Decimal(card_gib)).to_integral_value(ROUND_CEILING))
    if fraction is not None:
        return fraction, slice_gib
    if not card_gib:
        raise ValueError(f"a memory slice of {memory_mib} MiB alone: the flavor's memory per "
                         "card is not known, so its fraction of a card cannot be told; "
                         f"give the fraction ({KAI_FRACTION} or {HAMI_CORES}) or name a "
                         "flavor whose card memory is set")
    counted = (Decimal(memory_mib or 0) / (Decimal(card_gib) * MIB_PER_GIB)).quantize(
        GPU_STEP, ROUND_CEILING)
    if counted >= 1:
        raise ValueError(f"a memory slice of {memory_mib} MiB is not less than a card "
                         f"({card_gib} GiB = {int(card_gib) * MIB_PER_GIB} MiB): ask "
                         f"{GPU_RESOURCE}: 1 for a whole card")
    return counted, slice_gib
