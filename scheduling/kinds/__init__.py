"""Workload kinds: the Kubernetes objects Allot runs from a manifest, a module per kind
(pod sets, gating, placement, status); `kind_of(manifest)` finds a manifest's kind.

Pure Python on plain JSON: the request stage derives pod sets with it, the backends build and
read the objects with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.kinds.apps import DEPLOYMENT, STATEFULSET
from scheduling.kinds.base import (
    GATES,
    SCHEDULING_GATE,
    SUSPEND,
    DerivedPodSet,
    Kind,
    ManifestError,
    Placement,
    RunState,
)
from scheduling.kinds.job import JOB
from scheduling.kinds.jobset import JOBSET
from scheduling.kinds.kubeflow import JAXJOB, MPIJOB, PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB
from scheduling.kinds.lws import LWS
from scheduling.kinds.ray import RAYCLUSTER, RAYJOB
from scheduling.kinds.trainjob import TRAINJOB
from scheduling.kinds.volcano import VOLCANO_JOB

KINDS: dict[str, Kind] = {k.key: k for k in (
    JOB, JOBSET, PYTORCHJOB, TFJOB, XGBOOSTJOB, JAXJOB, PADDLEJOB, MPIJOB, TRAINJOB, RAYJOB,
    RAYCLUSTER, LWS, DEPLOYMENT, STATEFULSET, VOLCANO_JOB)}

MAX_MANIFEST_BYTES = 1_000_000

__all__ = ["GATES", "KINDS", "SCHEDULING_GATE", "SUSPEND", "DerivedPodSet", "Kind",
           "ManifestError", "Placement", "RunState", "kind_names", "kind_named", "kind_of"]


def kind_names(keys: list[str]) -> list[str]:
    """Short names of kinds for pages: `PyTorchJob`, `Job (Volcano)` for the one whose name
    another kind has too."""
    names = []
    for key in keys:
        kind = KINDS.get(key)
        if kind is None:
            continue
        names.append("Job (Volcano)" if kind is VOLCANO_JOB else kind.kind)
    return names


def kind_named(key: str) -> Kind | None:
    """The kind stored as `apiVersion/Kind` (None for Allot's own image-and-command Jobs)."""
    return KINDS.get(key)


def kind_of(manifest: Any) -> Kind:
    """The kind of a manifest, from its apiVersion and kind; ManifestError if unknown."""
    if not isinstance(manifest, Mapping):
        raise ManifestError("manifest", "manifest", "expected an object (a Kubernetes manifest)")
    kind, api_version = manifest.get("kind"), manifest.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        raise ManifestError("manifest", "kind", "required: the object's kind")
    if not isinstance(api_version, str) or not api_version:
        raise ManifestError(kind, "apiVersion", "required: the object's apiVersion")
    found = KINDS.get(f"{api_version}/{kind}")
    if found is None:
        same = sorted(k.api_version for k in KINDS.values() if k.kind == kind)
        hint = f" (Allot runs {kind} of {', '.join(same)})" if same else ""
        known = ", ".join(sorted(KINDS))
        raise ManifestError(kind, "apiVersion/kind",
                            f"unknown kind {api_version}/{kind}{hint}; known: {known}")
    return found
