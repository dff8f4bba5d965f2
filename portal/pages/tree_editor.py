"""The quota tree editor's form handling: cells in, specs out, problems per queue.

Cells are named `c|<queue id>|<flavor>|<resource>|<min|max|lendable>`; a key whose three
cells are empty is not set on that queue (its defaults apply).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from quotas import selectors as tree_selectors
from quotas.models import Flavor, Queue
from quotas.services import to_decimal
from quotas.tree_rules import QueueSpec, QuotaSpec, validate_tree

FIELDS = ("min", "max", "lendable")
Key = tuple[str, str]


@dataclass
class EditorState:
    """The tree as edited: specs by path, what changed, and the problems found."""

    specs: dict[str, QueueSpec]
    changed: list[str] = field(default_factory=list)
    input_errors: dict[str, list[str]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.input_errors


def editor_keys(specs: Mapping[str, QueueSpec]) -> list[Key]:
    """Columns: every flavor's gpu key plus any other key some queue sets."""
    keys = {(f, "gpu") for f in Flavor.objects.values_list("name", flat=True)}
    for spec in specs.values():
        keys.update(spec.quota)
    order = {"gpu": 0, "cpu": 1, "memory": 2}
    return sorted(keys, key=lambda k: (k[0], order.get(k[1], 9)))


def _number(raw: str, where: str, errors: list[str], resource: str) -> Decimal | None:
    raw = raw.strip()
    if not raw:
        return None
    try:  # the tree service's own check: a number in the resource's unit, or a quantity
        return to_decimal(raw, where, resource)
    except ValidationError as exc:
        errors.extend(exc.messages)
        return None


def editor_apply(post: Mapping[str, str]) -> EditorState:
    """The stored tree with the posted cells applied, checked with the tree rules."""
    stored = tree_selectors.tree_specs()
    ids = dict(Queue.objects.values_list("id", "path"))
    cells: dict[str, dict[Key, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    for name, raw in post.items():
        if not name.startswith("c|"):
            continue
        parts = name.split("|")
        if len(parts) != 5 or parts[4] not in FIELDS or not parts[1].isdigit():
            continue
        path = ids.get(int(parts[1]))
        if path is not None:
            cells[path][(parts[2], parts[3])][parts[4]] = raw
    state = EditorState(specs=dict(stored))
    for path, keys in cells.items():
        quota = dict(stored[path].quota)
        problems: list[str] = []
        for key, values in keys.items():
            where = f"{path}: {key[0]}/{key[1]}"
            nums = {f: _number(values.get(f, ""), f"{where}: {f}", problems, key[1])
                    for f in FIELDS}
            if all(v is None for v in nums.values()) and all(
                not values.get(f, "").strip() for f in FIELDS
            ):
                quota.pop(key, None)
            else:
                quota[key] = QuotaSpec(min=nums["min"] if nums["min"] is not None
                                       else Decimal(0), max=nums["max"],
                                       lendable=nums["lendable"])
        if problems:
            state.input_errors.setdefault(path, []).extend(problems)
        if quota != dict(stored[path].quota):
            state.specs[path] = QueueSpec(path=path, parent=stored[path].parent, quota=quota)
            state.changed.append(path)
    report = validate_tree(
        state.specs.values(), flavors=tree_selectors.flavor_names(),
        fleet_capacity=tree_selectors.fleet_capacity(),
        max_depth=tree_selectors.max_tree_depth(),
    )
    for p in report.errors:
        state.errors.setdefault(p.queue, []).append(p.message)
    for p in report.warnings:
        state.warnings.setdefault(p.queue, []).append(p.message)
    return state


def editor_rows(specs: Mapping[str, QueueSpec], keys: list[Key],
                post: Mapping[str, str] | None = None, *, editable: bool = True,
                visible: Any = None) -> list[dict[str, Any]]:
    """Rows for the table: queue, depth and its cells, as ready HTML (inputs when editable).

    The cells are built here rather than in a template loop: 200 queues x 2 keys x 3 fields is
    1,200 inputs, and Django's template engine took most of the page's time on them.
    """
    rows = []
    report = validate_tree(specs.values())
    for q in Queue.objects.order_by("path").only("id", "path", "depth", "name"):
        if visible is not None and not visible(q.pk):
            continue
        spec = specs.get(q.path)
        parts = []
        for key in keys:
            mine = spec.quota.get(key) if spec else None
            resolved = report.resolved.get(q.path, {}).get(key)
            kn = f"{key[0]}/{key[1]}"
            for f in FIELDS:
                name = f"c|{q.pk}|{key[0]}|{key[1]}|{f}"
                if post is not None and name in post:
                    text = post[name]
                else:
                    value = getattr(mine, f) if mine is not None else None
                    text = "" if value is None else format(Decimal(value).normalize(), "f")
                default = getattr(resolved, f) if resolved is not None else None
                if default is None:
                    placeholder = "∞" if f == "max" and resolved is not None else ""
                else:
                    placeholder = format(Decimal(default).normalize(), "f")
                if editable:
                    parts.append(format_html(
                        '<td class="num"><input type="text" inputmode="decimal" name="{}" '
                        'value="{}" placeholder="{}" aria-label="{} {} {}" size="5"></td>',
                        name, text, placeholder, q.path, kn, f))
                else:
                    parts.append(format_html('<td class="num">{}</td>', text or placeholder))
        rows.append({"id": q.pk, "path": q.path, "name": q.name, "depth": q.depth,
                     "cells_html": mark_safe("".join(parts))})  # each part escaped by format_html
    return rows
