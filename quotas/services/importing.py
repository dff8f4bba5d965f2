"""A whole tree replaced at once, as an importer (Kueue, Volcano, Koordinator) or the demo
seed hands it over: validated as one, saved all or nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError

from core.history import history_batch
from quotas import selectors
from quotas.models import Flavor, Queue
from quotas.services.tree import (
    QuotaMap,
    _check_name,
    _check_namespaces,
    _check_strategy,
    _flavor_map,
    _leaves,
    _queue_state,
    _save_queue,
    _warnings,
    _write_quota,
    default_namespace,
    lock_tree,
    to_decimal,
    tree_check,
)
from quotas.tree_rules import QueueSpec


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
    gpu_equivalents: Mapping[str, float] = field(default_factory=dict)


@dataclass
class TreeReplaceResult:
    """What `tree_replace` did: counts and the warnings."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    flavors_created: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


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
    lock_tree()
    result = TreeReplaceResult()
    defs = list(queues)
    by_path: dict[str, QueueDef] = {}
    for d in defs:
        if d.path in by_path:
            raise ValidationError(f"{d.path}: defined twice")
        for part in d.path.split("/"):
            _check_name(part, f"{d.path}: queue name")
        _check_strategy(d.strategy, d.path)
        for (fname, resource), spec in d.quota.items():  # numbers the columns can hold
            for name in ("min", "max", "lendable"):
                to_decimal(getattr(spec, name), f"{d.path}: {fname}/{resource}: {name}",
                           resource)
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
            flavor = Flavor(
                name=fd.name, node_selector=dict(fd.node_selector),
                gpu_memory_gib=fd.gpu_memory_gib, gpu_equivalents=dict(fd.gpu_equivalents),
            )
            flavor.full_clean()
            flavor.save()
            known[fd.name] = flavor
            result.flavors_created.append(fd.name)
        else:
            changed = []
            if fd.node_selector and dict(fd.node_selector) != flavor.node_selector:
                flavor.node_selector = dict(fd.node_selector)
                changed.append("node_selector")
            if fd.gpu_equivalents and dict(fd.gpu_equivalents) != flavor.gpu_equivalents:
                flavor.gpu_equivalents = dict(fd.gpu_equivalents)
                flavor.full_clean()
                changed.append("gpu_equivalents")
            if changed:
                flavor.save(update_fields=changed)

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
