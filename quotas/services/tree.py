"""What every write to the quota tree shares: its lock, name and quantity checks, the whole
tree checked with a change applied (`tree_check`), and the rows written.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from core import db
from core.quantity import QuantityError, amount_to_base, read_amount
from quotas import selectors
from quotas.models import Flavor, Queue, QuotaEntry, Resource, Strategy
from quotas.tree_rules import QueueSpec, QuotaSpec, TreeReport, validate_tree

Key = tuple[str, str]
QuotaMap = Mapping[Key, QuotaSpec]
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_QUOTA = Decimal("99999999999.999")  # what QuotaEntry's DecimalField(14, 3) can hold
_LOCK_ID = zlib.crc32(b"allot.quota-tree")


@dataclass
class TreeChange:
    """What a tree service did: the queue it touched (None after a delete) and the warnings."""

    queue: Queue | None
    warnings: list[str] = field(default_factory=list)


# --- helpers -----------------------------------------------------------------------------


def lock_tree() -> None:
    """Serialise tree changes: two concurrent edits must not each pass validation alone."""
    db.xact_lock_join(_LOCK_ID)


def default_namespace(path: str) -> str:
    """The Kubernetes namespace a leaf maps to by default: `rd/vision` -> `rd-vision`."""
    name = re.sub(r"[^a-z0-9-]+", "-", path.lower().replace("/", "-")).strip("-")
    return name[:63].rstrip("-") or "allot"


def _check_name(name: str, what: str = "queue name") -> None:
    if not isinstance(name, str) or not DNS_LABEL.fullmatch(name) or len(name) > 63:
        raise ValidationError(
            f"{what} {name!r} is not a DNS-1123 label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )


def _check_strategy(strategy: str, where: str) -> None:
    if strategy not in ("", *Strategy.values):
        raise ValidationError(
            f"{where}: strategy {strategy!r} is not one of {', '.join(Strategy.values)} "
            "(or empty to inherit)"
        )


def to_decimal(value: Any, where: str, resource: str | None = None) -> Decimal | None:
    """A quota number as Decimal (None stays None); a clear error for anything else.

    With `resource`, any Kubernetes quantity (`4G`, `500m`, `2048Gi`) is accepted too and
    read exactly in Allot's unit for it (GiB, cores, cards, a count)."""
    if value is None:
        return None
    if resource is not None:
        try:
            return read_amount(resource, value)
        except QuantityError as exc:
            raise ValidationError(f"{where}: {exc}") from exc
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValidationError(f"{where}: {value!r} is not a number")
    try:
        number = Decimal(str(value))
    except InvalidOperation as exc:
        raise ValidationError(f"{where}: {value!r} is not a number") from exc
    if not number.is_finite():
        raise ValidationError(f"{where}: {value!r} is not a finite number")
    if abs(number) > MAX_QUOTA:
        raise ValidationError(f"{where}: {value} is larger than {MAX_QUOTA}")
    if number != number.quantize(Decimal("0.001")):
        raise ValidationError(f"{where}: {value} has more than 3 decimal places")
    return number


def tree_check(specs: Iterable[QueueSpec], *, extra_flavors: Iterable[str] = ()) -> TreeReport:
    """Validate a whole tree against the database's flavors, fleet and depth limit.

    Raises ValidationError with every error message; returns the report (with warnings).
    """
    flavors = selectors.flavor_names() | set(extra_flavors)
    report = validate_tree(
        list(specs),
        flavors=flavors,
        fleet_capacity=selectors.fleet_capacity(),
        max_depth=selectors.max_tree_depth(),
    )
    if report.errors:
        raise ValidationError([p.message for p in report.errors])
    return report


def _warnings(report: TreeReport) -> list[str]:
    return [p.message for p in report.warnings]


def _write_quota(queue: Queue, quota: QuotaMap, flavors: Mapping[str, Flavor]) -> None:
    """Make the queue's stored entries exactly `quota`.

    Entries that already hold their numbers are not saved again: each save is a row in the
    entry's history, and an import or a tree edit touches a few keys among many.
    """
    existing = {(e.flavor.name, e.resource): e for e in queue.quotas.select_related("flavor")}
    for key, old in existing.items():
        if key not in quota:
            old.delete()
    for key, spec in quota.items():
        entry: QuotaEntry | None = existing.get(key)
        numbers = (_exact(spec.min if spec.min is not None else 0),
                   None if spec.max is None else _exact(spec.max),
                   None if spec.lendable is None else _exact(spec.lendable))
        bases = tuple(None if n is None else amount_to_base(key[1], n) for n in numbers)
        if entry is None:
            entry = QuotaEntry(queue=queue, flavor=flavors[key[0]], resource=key[1])
        elif (entry.min_base, entry.max_base, entry.lendable_base) == bases:
            continue
        for name, number in zip(("min", "max", "lendable"), numbers, strict=True):
            entry.set_exact(name, number)
        entry.save()


def _exact(value: Any) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


_QUEUE_FIELDS = ("name", "parent_id", "strategy", "namespace", "description")


def _queue_state(queue: Queue) -> tuple[Any, ...]:
    return tuple(getattr(queue, f) for f in _QUEUE_FIELDS)


def _save_queue(queue: Queue, before: tuple[Any, ...] | None) -> None:
    """Save a new or changed queue (a row in its history); an unchanged one only has its
    updated_at moved, which the engine's snapshot stamp reads to see its quotas changed."""
    if before is None or before != _queue_state(queue):
        queue.save()
    else:
        Queue.objects.filter(pk=queue.pk).update(updated_at=timezone.now())


def _set_namespace(queue_id: int, namespace: str) -> None:
    """A queue's namespace changed as a side effect (it became or stopped being a leaf):
    saved, not updated in bulk, so that its history shows it."""
    queue = Queue.objects.select_related("parent").get(pk=queue_id)
    if queue.namespace != namespace:
        queue.namespace = namespace
        queue.save(update_fields=["namespace"])


def _flavor_map() -> dict[str, Flavor]:
    return {f.name: f for f in Flavor.objects.all()}


def _check_namespaces(
    assign: Mapping[str, str], leaves: set[str], changed: Iterable[str] = ()
) -> None:
    """Two leaves may not share a namespace: a workload's queue must be unambiguous."""
    seen: dict[str, str] = {}
    late = set(changed)
    for path in sorted(leaves, key=lambda p: (p in late, p)):
        ns = assign.get(path, "")
        if not ns:
            continue
        _check_name(ns, f"{path}: namespace")
        if ns in seen:
            raise ValidationError(
                f"{path}: namespace {ns!r} is already used by leaf queue {seen[ns]}"
            )
        seen[ns] = path


OPEN_WORKLOAD_STATES = ("pending", "reserved", "running", "preempting")


def _check_can_have_children(parent: Queue | None) -> None:
    """Workloads live on leaves: a queue holding open workloads cannot become a parent."""
    if parent is None:
        return
    workloads = getattr(parent, "workloads", None)
    if workloads is None:
        return
    count = workloads.filter(state__in=OPEN_WORKLOAD_STATES).count()
    if count:
        raise ValidationError(
            f"{parent.path}: holds {count} open workload(s) (pending or admitted); a queue with "
            "workloads must stay a leaf, so it cannot get child queues until they end"
        )


def _leaves(specs: Mapping[str, QueueSpec]) -> set[str]:
    parents = {s.parent for s in specs.values() if s.parent}
    return set(specs) - parents


def _namespaces_after(specs: Mapping[str, QueueSpec], overrides: Mapping[str, str]) -> dict:
    current = dict(Queue.objects.values_list("path", "namespace"))
    current.update(overrides)
    leaves = _leaves(specs)
    return {p: (current.get(p) or default_namespace(p)) for p in leaves}


FLAVOR_FIELDS = ("node_selector", "gpu_memory_gib", "interconnect_label", "mig_profiles",
                 "gpu_equivalents", "notes")


def resources() -> tuple[str, ...]:
    """The resources a quota key may name."""
    return tuple(Resource.values)
