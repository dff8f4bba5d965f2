"""Field checks of the scenario loader: each problem becomes one line (naming the queue, key or
workload and the numbers) and loading goes on, so a file's problems are reported together."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from core.quantity import QuantityError, read_amount, resource_name_problem

STRATEGIES = ("binpack", "spread")


class Checker:
    """Reads fields of a parsed scenario, collecting what is wrong in `problems`."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def keys(self, obj: Any, allowed: set[str], required: set[str], where: str) -> bool:
        if not isinstance(obj, Mapping):
            self.problems.append(f"{where}: expected a mapping, got {type(obj).__name__}")
            return False
        for k in obj:
            if not isinstance(k, str) or (k not in allowed and not k.startswith("x-")):
                self.problems.append(f"{where}: unknown key {k!r}")
        for k in sorted(required):
            if k not in obj:
                self.problems.append(f"{where}: missing field {k!r}")
        return True

    def num(self, obj: Mapping[str, Any], key: str, where: str, default: float | None,
            *, lo: float | None = 0.0, hi: float | None = None,
            integer: bool = False) -> float | None:
        if key not in obj or obj[key] is None:
            return default
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            self.problems.append(f"{where}: {key} must be a number, got {v!r}")
            return default
        if integer and float(v) != int(v):
            self.problems.append(f"{where}: {key} must be a whole number, got {v}")
            return default
        if lo is not None and v < lo:
            self.problems.append(f"{where}: {key} {v} < {lo:g}")
            return default
        if hi is not None and v > hi:
            self.problems.append(f"{where}: {key} {v} > {hi:g}")
            return default
        return float(v)

    def qty(self, obj: Mapping[str, Any], key: str, where: str, default: float | None,
            resource: str, *, lo: float | None = 0.0) -> float | None:
        """A quantity: a number in Allot's unit or a Kubernetes quantity string (`500m`, `4G`,
        `2048Gi`) for `resource` (QUOTA-SEMANTICS.md §10)."""
        if key not in obj or not isinstance(obj[key], str):
            return self.num(obj, key, where, default, lo=lo)
        try:
            value = float(read_amount(resource, obj[key]))
        except QuantityError as exc:
            self.problems.append(f"{where}: {key}: {exc}")
            return default
        if lo is not None and value < lo:
            self.problems.append(f"{where}: {key} {obj[key]} < {lo:g}")
            return default
        return value

    def resources(self, obj: Mapping[str, Any], where: str) -> tuple[tuple[str, float], ...]:
        """A `resources` mapping of extended resources (name -> quantity), as sorted pairs."""
        raw = obj.get("resources")
        if raw is None:
            return ()
        if not isinstance(raw, Mapping):
            self.problems.append(f"{where}: resources must be a mapping of resource names")
            return ()
        out: dict[str, float] = {}
        for name in raw:
            problem = resource_name_problem(name)
            if problem:
                self.problems.append(f"{where}: {problem}")
                continue
            if name in ("gpu", "cpu", "memory"):
                self.problems.append(f"{where}: resources: {name} has its own field")
                continue
            value = self.qty(raw, name, f"{where} resources", None, name)
            if value:
                out[name] = value
        return tuple(sorted(out.items()))

    def boolean(self, obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        v = obj.get(key, default)
        if not isinstance(v, bool):
            self.problems.append(f"{where}: {key} must be true or false, got {v!r}")
            return default
        return v

    def text(self, obj: Mapping[str, Any], key: str, where: str, default: str = "",
             choices: tuple[str, ...] | None = None) -> str:
        if key not in obj or obj[key] is None:
            return default
        v = obj[key]
        if not isinstance(v, str):
            self.problems.append(f"{where}: {key} must be a string, got {v!r}")
            return default
        if choices is not None and v not in choices:
            self.problems.append(f"{where}: {key} {v!r} is not one of {', '.join(choices)}")
            return default
        return v

    def items(self, obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
        v = obj.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            self.problems.append(f"{where}: {key} must be a list")
            return []
        return v


def label(obj: Any, fallback: str, kind: str) -> str:
    """Name an item by its own name when it has one ("workload w1"), else by position."""
    if isinstance(obj, Mapping) and isinstance(obj.get("name"), str) and obj["name"]:
        return f"{kind} {obj['name']}"
    return fallback
