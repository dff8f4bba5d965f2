"""Writes to the quota tree. Every change builds the WHOLE tree with the change applied, checks
it with `quotas.tree_rules.validate_tree` and saves nothing unless every rule holds.

Errors are raised as one Django `ValidationError` carrying every message (each names the queue,
the key and the numbers); warnings (W1-W3) come back in the result so callers show them.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from core import db
from core.history import history_batch
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


@dataclass(frozen=True)
class QueueDef:
    """A queue as an importer describes it; its parent is implied by its path."""

    path: str
    quota: QuotaMap = field(default_factory=dict)
    strategy: str = ""
    namespace: str = ""
    description: str = ""


@dataclass(frozen=True)
class FlavorDef:
    """A flavor as an importer describes it."""

    name: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    gpu_memory_gib: int | None = None


@dataclass
class TreeReplaceResult:
    """What `tree_replace` did: counts and the warnings."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    flavors_created: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --- helpers -----------------------------------------------------------------------------


def _lock_tree() -> None:
    """Serialise tree changes: two concurrent edits must not each pass validation alone."""
    db.xact_lock_join(_LOCK_ID)


def default_namespace(path: str) -> str:
    """The Kubernetes namespace a leaf maps to by default: `rd/vision` -> `rd-vision`."""
    name = re.sub(r"[^a-z0-9-]+", "-", path.lower().replace("/", "-")).strip("-")
    return name[:63].rstrip("-") or "allot"


def _check_name(name: str, what: str = "queue name") -> None:
    if not isinstance(name, str) or not DNS_LABEL.match(name) or len(name) > 63:
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


def to_decimal(value: Any, where: str) -> Decimal | None:
    """A quota number as Decimal (None stays None); a clear error for anything else."""
    if value is None:
        return None
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
        numbers = (Decimal(spec.min if spec.min is not None else 0),
                   None if spec.max is None else Decimal(spec.max),
                   None if spec.lendable is None else Decimal(spec.lendable))
        if entry is None:
            entry = QuotaEntry(queue=queue, flavor=flavors[key[0]], resource=key[1])
        elif (entry.min, entry.max, entry.lendable) == numbers:
            continue
        entry.min, entry.max, entry.lendable = numbers
        entry.save()


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


# --- queues --------------------------------------------------------------------------------


@transaction.atomic
def queue_create(
    *,
    name: str,
    parent: Queue | None = None,
    quota: QuotaMap | None = None,
    strategy: str = "",
    namespace: str = "",
    description: str = "",
) -> TreeChange:
    """Add a queue under `parent` (None: a top-level queue) with what it sets per key."""
    _lock_tree()
    _check_name(name)
    _check_can_have_children(parent)
    path = f"{parent.path}/{name}" if parent else name
    _check_strategy(strategy, path)
    specs = selectors.tree_specs()
    if path in specs:
        raise ValidationError(f"{path}: a queue with this path already exists")
    specs[path] = QueueSpec(path=path, parent=parent.path if parent else None, quota=quota or {})
    report = tree_check(specs.values())
    _check_namespaces(_namespaces_after(specs, {path: namespace}), _leaves(specs), [path])
    queue = Queue(
        parent=parent, name=name, strategy=strategy, description=description,
        namespace=namespace or default_namespace(path),
    )
    queue.save()
    _write_quota(queue, quota or {}, _flavor_map())
    if parent is not None and parent.namespace:
        # A queue with children is no longer a leaf: it maps to no namespace.
        _set_namespace(parent.pk, "")
    return TreeChange(queue=queue, warnings=_warnings(report))


_UNSET: Any = object()


@transaction.atomic
def queue_update(
    *,
    queue: Queue,
    name: str = _UNSET,
    parent: Queue | None = _UNSET,
    quota: QuotaMap | None = None,
    quota_merge: Mapping[Key, QuotaSpec | None] | None = None,
    strategy: str = _UNSET,
    namespace: str = _UNSET,
    description: str = _UNSET,
) -> TreeChange:
    """Rename, move, or change a queue; `quota` replaces all its keys, `quota_merge` sets or
    (with None) clears single keys. Moving or renaming re-paths its whole subtree."""
    _lock_tree()
    queue = Queue.objects.select_for_update().get(pk=queue.pk)
    before = _queue_state(queue)
    old_path = queue.path
    new_name = queue.name if name is _UNSET else name
    _check_name(new_name)
    new_parent = queue.parent if parent is _UNSET else parent
    if new_parent is not None:
        assert new_parent.pk is not None, "the new parent must be a saved queue"
        new_parent = Queue.objects.get(pk=new_parent.pk)
        if new_parent.pk == queue.pk or new_parent.path.startswith(f"{old_path}/"):
            raise ValidationError(
                f"{old_path}: cannot move under {new_parent.path}: that would make a parent "
                "cycle (a queue cannot be its own ancestor)"
            )
        if new_parent.pk != queue.parent_id:
            _check_can_have_children(new_parent)
    new_path = f"{new_parent.path}/{new_name}" if new_parent else new_name
    if strategy is not _UNSET:
        _check_strategy(strategy, new_path)

    specs = selectors.tree_specs()
    current = specs[old_path]
    new_quota: dict[Key, QuotaSpec] = dict(current.quota if quota is None else quota)
    for key, spec in (quota_merge or {}).items():
        if spec is None:
            new_quota.pop(key, None)
        else:
            new_quota[key] = spec

    def moved(path: str) -> str:
        if path == old_path:
            return new_path
        if path.startswith(f"{old_path}/"):
            return new_path + path[len(old_path):]
        return path

    new_specs: dict[str, QueueSpec] = {}
    for path, qspec in specs.items():
        target = moved(path)
        if target in new_specs:
            raise ValidationError(f"{target}: a queue with this path already exists")
        if path == old_path:
            new_specs[target] = QueueSpec(
                path=target, parent=new_parent.path if new_parent else None, quota=new_quota
            )
        else:
            new_specs[target] = QueueSpec(
                path=target, parent=moved(qspec.parent) if qspec.parent else None,
                quota=qspec.quota,
            )
    report = tree_check(new_specs.values())
    ns_override = {} if namespace is _UNSET else {new_path: namespace}
    # Namespaces are stored per old path: translate them before checking uniqueness.
    stored = {moved(p): ns for p, ns in Queue.objects.values_list("path", "namespace")}
    stored.update(ns_override)
    leaves = _leaves(new_specs)
    _check_namespaces(
        {p: stored.get(p) or default_namespace(p) for p in leaves}, leaves, [new_path]
    )

    queue.name = new_name
    queue.parent = new_parent
    if strategy is not _UNSET:
        queue.strategy = strategy
    if description is not _UNSET:
        queue.description = description
    if namespace is not _UNSET:
        queue.namespace = namespace or (default_namespace(new_path) if new_path in leaves else "")
    elif new_path in leaves and not queue.namespace:
        queue.namespace = default_namespace(new_path)
    _save_queue(queue, before)
    if old_path != new_path:
        for sub in Queue.objects.filter(path__startswith=f"{old_path}/").order_by("depth"):
            sub.parent = Queue.objects.get(pk=sub.parent_id)  # type: ignore[misc]
            sub.save()
    if new_parent is not None and new_parent.namespace:
        _set_namespace(new_parent.pk, "")
    _write_quota(queue, new_quota, _flavor_map())
    queue.refresh_from_db()
    return TreeChange(queue=queue, warnings=_warnings(report))


@transaction.atomic
def queue_delete(*, queue: Queue) -> TreeChange:
    """Remove a queue that has no children and nothing referring to it (workloads, teams)."""
    _lock_tree()
    queue = Queue.objects.select_for_update().get(pk=queue.pk)
    children = list(queue.children.values_list("path", flat=True))
    if children:
        raise ValidationError(
            f"{queue.path}: has {len(children)} child queue(s) ({', '.join(sorted(children))}); "
            "delete or move them first"
        )
    specs = selectors.tree_specs()
    del specs[queue.path]
    report = tree_check(specs.values())
    parent = queue.parent
    try:
        queue.delete()
    except ProtectedError as exc:
        kinds = sorted({str(type(o)._meta.verbose_name_plural) for o in exc.protected_objects})
        raise ValidationError(
            f"{queue.path}: still referred to by {', '.join(str(k) for k in kinds)}; "
            "it cannot be deleted"
        ) from exc
    if parent is not None and not parent.children.exists() and not parent.namespace:
        _set_namespace(parent.pk, default_namespace(parent.path))
    return TreeChange(queue=None, warnings=_warnings(report))


@transaction.atomic
def quota_set(
    *,
    queue: Queue,
    flavor: str,
    resource: str,
    min: Decimal | int | None = None,  # noqa: A002 - the domain's word
    max: Decimal | int | None = None,  # noqa: A002
    lendable: Decimal | int | None = None,
    clear: bool = False,
) -> TreeChange:
    """Set (or with `clear`, remove) one key of a queue; None max/lendable take the defaults."""
    key = (flavor, resource)
    where = f"{queue.path}: {flavor}/{resource}"
    if clear:
        return queue_update(queue=queue, quota_merge={key: None})
    spec = QuotaSpec(
        min=to_decimal(min if min is not None else 0, f"{where}: min"),
        max=to_decimal(max, f"{where}: max"),
        lendable=to_decimal(lendable, f"{where}: lendable"),
    )
    return queue_update(queue=queue, quota_merge={key: spec})


# --- flavors -------------------------------------------------------------------------------


def _check_flavor_fields(data: Mapping[str, Any]) -> None:
    selector = data.get("node_selector", {})
    if not isinstance(selector, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):
        raise ValidationError("node_selector must map label names to string values")
    gpu_mem = data.get("gpu_memory_gib")
    if gpu_mem is not None and (isinstance(gpu_mem, bool) or not isinstance(gpu_mem, int)
                                or gpu_mem <= 0):
        raise ValidationError(f"gpu_memory_gib {gpu_mem!r} must be a positive whole number")


FLAVOR_FIELDS = ("node_selector", "gpu_memory_gib", "interconnect_label", "mig_profiles", "notes")


@transaction.atomic
def flavor_create(*, name: str, **fields: Any) -> Flavor:
    """Register a flavor (a class of node) by name and node labels."""
    _check_name(name, "flavor name")
    if Flavor.objects.filter(name=name).exists():
        raise ValidationError(f"flavor {name!r} already exists")
    unknown = set(fields) - set(FLAVOR_FIELDS)
    if unknown:
        raise ValidationError(f"unknown flavor field(s): {', '.join(sorted(unknown))}")
    _check_flavor_fields(fields)
    flavor = Flavor(name=name, **fields)
    flavor.full_clean()
    flavor.save()
    return flavor


@transaction.atomic
def flavor_update(*, flavor: Flavor, **fields: Any) -> Flavor:
    """Change a flavor's labels or facts (its name is fixed: quotas refer to it)."""
    unknown = set(fields) - set(FLAVOR_FIELDS)
    if unknown:
        raise ValidationError(f"unknown flavor field(s): {', '.join(sorted(unknown))}")
    _check_flavor_fields({"node_selector": flavor.node_selector, **fields})
    fields = {n: v for n, v in fields.items() if getattr(flavor, n) != v}
    if not fields:
        return flavor  # nothing changed: no save, no row in its history
    for name, value in fields.items():
        setattr(flavor, name, value)
    flavor.full_clean()
    flavor.save()
    return flavor


# --- importers -----------------------------------------------------------------------------


@transaction.atomic
def tree_replace(
    *,
    queues: Iterable[QueueDef],
    flavors: Iterable[FlavorDef] = (),
    prune: bool = False,
) -> TreeReplaceResult:
    """Create or update many queues (and flavors) at once, all or nothing (for importers).

    Each queue's stored quota becomes exactly what its definition sets. Queues not named stay
    as they are, unless `prune`, which deletes them (they must hold no workloads).
    """
    # Hundreds of saves at once: their history goes in one INSERT per table at the end.
    with history_batch():
        return _tree_replace(queues=queues, flavors=flavors, prune=prune)


def _tree_replace(
    *, queues: Iterable[QueueDef], flavors: Iterable[FlavorDef], prune: bool
) -> TreeReplaceResult:
    _lock_tree()
    result = TreeReplaceResult()
    defs = list(queues)
    by_path: dict[str, QueueDef] = {}
    for d in defs:
        if d.path in by_path:
            raise ValidationError(f"{d.path}: defined twice")
        for part in d.path.split("/"):
            _check_name(part, f"{d.path}: queue name")
        _check_strategy(d.strategy, d.path)
        by_path[d.path] = d
    flavor_defs = list(flavors)
    known = _flavor_map()
    for fd in flavor_defs:
        _check_name(fd.name, "flavor name")

    specs = selectors.tree_specs()
    if prune:
        result.deleted = sorted((p for p in specs if p not in by_path), key=lambda p: -p.count("/"))
        specs = {p: s for p, s in specs.items() if p in by_path}
    for path, d in by_path.items():
        parent = path.rsplit("/", 1)[0] if "/" in path else None
        specs[path] = QueueSpec(path=path, parent=parent, quota=dict(d.quota))
    report = tree_check(specs.values(), extra_flavors=[f.name for f in flavor_defs])
    leaves = _leaves(specs)
    stored = dict(Queue.objects.values_list("path", "namespace"))
    stored.update({p: d.namespace for p, d in by_path.items() if d.namespace})
    _check_namespaces(
        {p: stored.get(p) or default_namespace(p) for p in leaves}, leaves, by_path
    )

    for fd in flavor_defs:
        flavor = known.get(fd.name)
        if flavor is None:
            flavor = Flavor.objects.create(
                name=fd.name, node_selector=dict(fd.node_selector),
                gpu_memory_gib=fd.gpu_memory_gib,
            )
            known[fd.name] = flavor
            result.flavors_created.append(fd.name)
        elif fd.node_selector and dict(fd.node_selector) != flavor.node_selector:
            flavor.node_selector = dict(fd.node_selector)
            flavor.save(update_fields=["node_selector"])

    for path in result.deleted:
        doomed = Queue.objects.get(path=path)
        try:
            doomed.delete()
        except ProtectedError as exc:
            raise ValidationError(
                f"{path}: not in the import and still referred to; it cannot be removed"
            ) from exc

    existing = {q.path: q for q in Queue.objects.all()}
    for path in sorted(by_path, key=lambda p: p.count("/")):
        d = by_path[path]
        parent_path, _, name = path.rpartition("/")
        parent_queue = existing[parent_path] if parent_path else None
        queue: Queue | None = existing.get(path)
        before = None if queue is None else _queue_state(queue)
        ns = d.namespace or (
            (queue.namespace if queue else "") or default_namespace(path)
            if path in leaves else ""
        )
        if queue is None:
            queue = Queue(parent=parent_queue, name=name)
            result.created.append(path)
        else:
            result.updated.append(path)
        queue.strategy = d.strategy
        queue.namespace = ns
        if d.description:
            queue.description = d.description
        _save_queue(queue, before)
        existing[path] = queue
        _write_quota(queue, d.quota, known)
    result.warnings = _warnings(report)
    return result


def resources() -> tuple[str, ...]:
    """The resources a quota key may name."""
    return tuple(Resource.values)
