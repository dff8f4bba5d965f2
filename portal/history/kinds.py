"""The kinds of object whose changes are recorded, and how each change reads.

A kind names its model by app label (the policies app may move package, its label stays), the
fields a change lists, and an owner: a quota entry's changes are part of its queue's history,
a node's of its cluster's, a threshold's of its budget's (`object=queue:12` lists both).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import cached_property
from typing import Any

from django.apps import apps
from django.db import models

Number = Decimal | int | float


@dataclass(frozen=True)
class Kind:
    """One tracked model as the history shows it."""

    key: str
    label: str
    model_label: str
    fields: tuple[str, ...]
    # Fields the object's label already says: not listed again when it is created or deleted.
    identity: tuple[str, ...] = ()
    owner: tuple[str, str] | None = None  # (owner kind, attname on this kind's rows)

    @cached_property
    def model(self) -> type[models.Model]:
        return apps.get_model(self.model_label)

    @cached_property
    def history_model(self) -> Any:
        model: Any = self.model
        return model.history.model

    def field(self, name: str) -> Any:
        """The model's field `name` (a concrete field: the kinds list no reverse relation)."""
        return self.model._meta.get_field(name)

    @cached_property
    def field_labels(self) -> dict[str, str]:
        return {f: str(self.field(f).verbose_name) for f in self.fields}


KINDS: tuple[Kind, ...] = (
    Kind("queue", "queue", "quotas.Queue",
         ("name", "parent", "path", "strategy", "namespace", "description"),
         identity=("name", "path")),
    Kind("quota", "quota", "quotas.QuotaEntry",
         ("flavor", "resource", "min", "max", "lendable"), identity=("flavor", "resource"),
         owner=("queue", "queue_id")),
    Kind("flavor", "flavor", "quotas.Flavor",
         ("name", "node_selector", "gpu_memory_gib", "interconnect_label", "mig_profiles",
          "gpu_equivalents", "notes"), identity=("name",)),
    Kind("cluster", "cluster", "scheduling.Cluster",
         ("name", "region", "kind", "backend", "connection", "health", "price", "datasets",
          "enabled"), identity=("name",)),
    Kind("node", "node", "scheduling.Node",
         ("name", "flavor", "gpus", "cpu", "memory_gib", "rack", "ready", "labels",
          "resources"),
         identity=("name",), owner=("cluster", "cluster_id")),
    Kind("policy", "policy", "policies.Policy",
         ("description", "kind", "match", "rule", "message", "key", "mode", "scope", "order",
          "version")),
    Kind("ratecard", "rate card", "billing.RateCard",
         ("flavor", "resource", "version", "effective_from", "rate", "frozen_rate", "unit",
          "currency", "note"), identity=("flavor", "resource", "version")),
    Kind("budget", "budget", "billing.Budget",
         ("cost_center", "period", "amount", "currency", "active"),
         identity=("cost_center", "period")),
    Kind("threshold", "budget threshold", "billing.BudgetThreshold",
         ("percent", "action"), identity=("percent", "action"), owner=("budget", "budget_id")),
)
BY_KEY = {k.key: k for k in KINDS}
KIND_CHOICES = [(k.key, k.label) for k in KINDS]


def kind_of(history_model: Any) -> Kind:
    """The kind whose historical model this is."""
    for kind in KINDS:
        if kind.history_model is history_model:
            return kind
    raise LookupError(f"{history_model!r} is not a tracked history model")


# --- values as people read them ---------------------------------------------------------------

UNITS = {"gpu": ("GPU", "GPUs"), "cpu": ("core", "cores"), "memory": ("GiB", "GiB")}


def number(value: Number) -> str:
    """16, 0.5, 1,000.25: no exponent, no trailing zeros."""
    if isinstance(value, float):
        value = Decimal(repr(value))
    text = format(Decimal(value).normalize(), "f")
    whole, _, frac = text.partition(".")
    sign = "-" if whole.startswith("-") else ""
    whole = f"{int(whole.lstrip('-') or 0):,}"
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def amount(value: Number, resource: str) -> str:
    """8 GPUs, 1 GPU, 64 cores, 512 GiB."""
    one, many = UNITS.get(resource, ("", ""))
    unit = one if Decimal(value) == 1 else many
    return f"{number(value)} {unit}".strip()


def raw(value: Any) -> Any:
    """A value as JSON carries it exactly (decimals as strings, moments in ISO 8601)."""
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def text(kind: Kind, field: str, value: Any, row: Any) -> str:
    """One field's value in words and units (`row`: the historical row it was read from)."""
    key = (kind.key, field)
    if value is None:
        return {
            ("quota", "max"): "unset (the parent's max)",
            ("quota", "lendable"): "unset (all of min)",
            ("flavor", "gpu_memory_gib"): "none (CPU only)",
            ("ratecard", "frozen_rate"): "unset (the rate)",
            ("queue", "parent"): "none (top level)",
        }.get(key, "–")
    if key in (("quota", "min"), ("quota", "max"), ("quota", "lendable")):
        return amount(value, row.resource)
    if key in (("node", "gpus"), ("node", "cpu")):
        return amount(value, "gpu" if field == "gpus" else "cpu")
    if key in (("node", "memory_gib"), ("flavor", "gpu_memory_gib")):
        return amount(value, "memory")
    if key == ("cluster", "health"):
        return f"{number(value * 100)}%"
    if key == ("cluster", "price"):
        return f"{number(value)} (relative)"
    if key in (("ratecard", "rate"), ("ratecard", "frozen_rate")):
        return f"{number(value)} {row.currency} per {row.unit}"
    if key == ("budget", "amount"):
        return f"{Decimal(value):,.2f} {row.currency}"
    if key == ("threshold", "percent"):
        return f"{value}%"
    model_field = kind.field(field)
    if model_field.is_relation:
        return f"#{value}"
    if model_field.choices:
        return str(dict(model_field.flatchoices).get(value, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True) if value else "(empty)"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    if isinstance(value, Decimal | float):
        return number(value)
    if value == "":
        return "(empty)"
    return str(value)
