"""The quota tree editor's form handling: cells in, specs out, problems per queue.

Cells are named `c|<queue id>|<flavor>|<resource>|<min|max|lendable>`; a key whose three
cells are empty is not set on that queue (its defaults apply).
"""

from __future__ import annotations

import re
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
from quotas.tree_rules import Problem, QueueSpec, QuotaSpec, validate_tree

FIELDS = ("min", "max", "lendable")
Key = tuple[str, str]


@dataclass(frozen=True)
class Shown:
    """A problem as the editor shows it: plain words, and the rule's exact text (`details`,
    "" when the words are the exact text)."""

    text: str
    details: str = ""

    def __str__(self) -> str:
        return self.text


_N = r"(-?[\d.]+|unlimited)"
_K = r"(?P<flavor>[^\s/:]+)/(?P<res>[a-z]+)"


def _of(value: str, flavor: str, res: str) -> str:
    unit = {"gpu": f"{flavor} GPUs", "cpu": f"CPUs on {flavor} nodes",
            "memory": f"GiB of memory on {flavor} nodes"}.get(res, f"{flavor} {res}")
    return f"{value} {unit}"


_PLAIN: list[tuple[str, re.Pattern[str], Any]] = [
    ("V1", re.compile(rf"^(?P<q>\S+): {_K}: lendable (?P<lend>{_N}) > min (?P<min>{_N})$"),
     lambda d: f"{d['q']} would lend {_of(d['lend'], d['flavor'], d['res'])} but is "
               f"guaranteed only {d['min']}: a queue can lend at most its guarantee."),
    ("V1", re.compile(rf"^(?P<q>\S+): {_K}: min (?P<min>{_N}) > max (?P<max>{_N})$"),
     lambda d: f"{d['q']} is guaranteed {_of(d['min'], d['flavor'], d['res'])} but may use "
               f"at most {d['max']}: the guarantee (min) cannot be above the limit (max)."),
    ("V1", re.compile(rf"^(?P<q>\S+): {_K}: (?P<f>\w+) (?P<v>{_N}) < 0$"),
     lambda d: f"{d['q']}: {d['f']} of {_of(d['v'], d['flavor'], d['res'])} is below 0; "
               "give 0 or more."),
    ("V2", re.compile(rf"^(?P<q>\S+): {_K}: children's min (?P<sum>{_N}) > min (?P<min>{_N})$"),
     lambda d: f"The queues under {d['q']} are guaranteed "
               f"{_of(d['sum'], d['flavor'], d['res'])} together, more than the {d['min']} "
               f"{d['q']} itself is guaranteed: raise {d['q']}'s min or lower theirs."),
    ("V3", re.compile(rf"^(?P<q>\S+): {_K}: max (?P<max>{_N}) > parent (?P<p>\S+) max "
                      rf"(?P<pmax>{_N})$"),
     lambda d: f"{d['q']} may use at most {_of(d['max'], d['flavor'], d['res'])}, more than "
               f"its parent {d['p']} may use ({d['pmax']})."),
    ("V4", re.compile(rf"^(?P<q>\S+): {_K}: children's exclusive (?P<sum>{_N}) > exclusive "
                      rf"(?P<ex>{_N}) \(min (?P<min>{_N}) - lendable (?P<lend>{_N})\)$"),
     lambda d: f"The queues under {d['q']} keep {_of(d['sum'], d['flavor'], d['res'])} for "
               f"themselves (their guarantees minus what they lend), more than the {d['ex']} "
               f"{d['q']} keeps for itself (its guarantee {d['min']} minus the {d['lend']} it "
               "lends): let them lend more, or let it lend less."),
    ("W1", re.compile(rf"^(?P<q>\S+): {_K}: children's max (?P<sum>{_N}) < min (?P<min>{_N})"),
     lambda d: f"The queues under {d['q']} may use at most "
               f"{_of(d['sum'], d['flavor'], d['res'])} together, less than {d['q']}'s "
               f"guarantee of {d['min']}: part of that guarantee can never be used."),
    ("W3", re.compile(rf"^\(root\): {_K}: top-level min (?P<top>{_N}) > installed capacity "
                      rf"(?P<cap>{_N})"),
     lambda d: f"The top-level queues are guaranteed {_of(d['top'], d['flavor'], d['res'])} "
               f"together, more than the {d['cap']} installed: not every guarantee can be "
               "honoured."),
]


def plain_problem(problem: Problem) -> Shown:
    """A tree rule's problem in plain words (the rule's exact text kept as the details)."""
    for code, pattern, words in _PLAIN:
        if code != problem.code:
            continue
        match = pattern.match(problem.message)
        if match:
            return Shown(words(match.groupdict()), problem.message)
    return Shown(problem.message)


@dataclass
class EditorState:
    """The tree as edited: specs by path, what changed, and the problems found."""

    specs: dict[str, QueueSpec]
    changed: list[str] = field(default_factory=list)
    input_errors: dict[str, list[str]] = field(default_factory=dict)
    errors: dict[str, list[Any]] = field(default_factory=dict)
    warnings: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.input_errors

    def problems_for(self, path: str) -> list[tuple[str, Any]]:
        """("error"|"warn", problem) of one queue, errors first."""
        return ([("error", m) for m in self.input_errors.get(path, [])]
                + [("error", m) for m in self.errors.get(path, [])]
                + [("warn", m) for m in self.warnings.get(path, [])])

    def unplaced(self, paths: set[str]) -> list[tuple[str, Any]]:
        """Problems of no row on the page ("(tree)", "(root)", hidden queues)."""
        return [item for path in {*self.input_errors, *self.errors, *self.warnings}
                if path not in paths for item in self.problems_for(path)]

    @property
    def error_count(self) -> int:
        return sum(len(v) for v in self.errors.values()) + sum(
            len(v) for v in self.input_errors.values())


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
        state.errors.setdefault(p.queue, []).append(plain_problem(p))
    for p in report.warnings:
        state.warnings.setdefault(p.queue, []).append(plain_problem(p))
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
