"""Queue writes: create, change, move, delete a queue, and set a quota entry; each checks
the whole tree with the change applied and saves nothing unless every rule holds."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError

from quotas import selectors
from quotas.models import Queue
from quotas.services.tree import (
    Key,
    QuotaMap,
    TreeChange,
    _check_can_have_children,
    _check_name,
    _check_namespaces,
    _check_strategy,
    _flavor_map,
    _leaves,
    _namespaces_after,
    _queue_state,
    _save_queue,
    _set_namespace,
    _warnings,
    _write_quota,
    default_namespace,
    lock_tree,
    to_decimal,
    tree_check,
)
from quotas.tree_rules import QueueSpec, QuotaSpec

_UNSET: Any = object()


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
    lock_tree()
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
    lock_tree()
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
    lock_tree()
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
        min=to_decimal(min if min is not None else 0, f"{where}: min", resource),
        max=to_decimal(max, f"{where}: max", resource),
        lendable=to_decimal(lendable, f"{where}: lendable", resource),
    )
    return queue_update(queue=queue, quota_merge={key: spec})
