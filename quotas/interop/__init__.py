"""Import and export of quota trees as Kueue, Volcano and Koordinator manifests.

`quotas_import` reads multi-document YAML (safely), builds the whole tree and hands it to
`quotas.services.tree_replace`: it validates with the tree rules and saves all or nothing.
`quotas_export` writes the stored tree as manifests those systems accept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from core.history import Source, history_context
from quotas.interop import koordinator, kueue, volcano
from quotas.interop.common import Node, Obj, build_tree, export_tree
from quotas.interop.loader import load_documents
from quotas.models import Flavor
from quotas.selectors import fleet_capacity
from quotas.services import FlavorDef, TreeReplaceResult, tree_replace

FORMATS = ("kueue", "volcano", "koordinator")


@dataclass
class ImportResult:
    """What an import did (or would do, with dry_run)."""

    system: str
    replaced: TreeReplaceResult
    skipped: list[str] = field(default_factory=list)
    dry_run: bool = False


def _system(doc: dict[str, Any]) -> str | None:
    api = doc.get("apiVersion")
    if not isinstance(api, str):
        return None
    group = api.split("/", 1)[0]
    if group == kueue.GROUP:
        return "kueue"
    if group == "scheduling.volcano.sh":
        return "volcano"
    if group in ("scheduling.sigs.k8s.io", "quota.koordinator.sh"):
        return "koordinator"
    return None


@transaction.atomic
def quotas_import(
    sources: Iterable[tuple[str, str | bytes]],
    *,
    default_flavor: str | None = None,
    prune: bool = False,
    dry_run: bool = False,
    user: Any = None,
) -> ImportResult:
    """Import (source name, YAML text) pairs; all or nothing. Errors name file, object, field.

    The changes are recorded in the history as `import`, by `user` when given.
    """
    with history_context(Source.IMPORT, user=user):
        return _import(sources, default_flavor=default_flavor, prune=prune, dry_run=dry_run)


def _import(
    sources: Iterable[tuple[str, str | bytes]],
    *,
    default_flavor: str | None,
    prune: bool,
    dry_run: bool,
) -> ImportResult:
    objs: list[Obj] = []
    skipped: list[str] = []
    systems: dict[str, str] = {}
    for source, text in sources:
        for index, doc in enumerate(load_documents(text, source=source), start=1):
            system = _system(doc)
            if system is None:
                kind = doc.get("kind", "?")
                skipped.append(f"{source}: document {index} ({kind}): not a quota object "
                               "(skipped)")
                continue
            obj = Obj(doc, source)
            systems.setdefault(system, obj.label)
            objs.append(obj)
    if not objs:
        raise ValidationError("no Kueue, Volcano or Koordinator quota objects found")
    if len(systems) > 1:
        found = ", ".join(f"{s} ({label})" for s, label in sorted(systems.items()))
        raise ValidationError(f"the files mix systems: {found}; import one system at a time")
    system = next(iter(systems))

    flavors: list[FlavorDef] = []
    nodes: list[Node]
    if system == "kueue":
        nodes, flavors, warnings = kueue.read(objs)
    elif system == "volcano":
        nodes, warnings = volcano.read(objs, default_flavor)
    else:
        nodes, warnings = koordinator.read(objs, default_flavor)
    skipped.extend(warnings)

    known = set(Flavor.objects.values_list("name", flat=True)) | {f.name for f in flavors}
    used = {flavor for node in nodes for flavor, _resource in node.quota}
    if default_flavor and default_flavor not in known and default_flavor in used:
        # `--flavor NAME` for a flavor that does not exist yet: create it, and say so.
        flavors.append(FlavorDef(name=default_flavor))
        known.add(default_flavor)
        skipped.append(f"flavor {default_flavor!r} did not exist: created it (no node labels, "
                       "no GPU memory; set them in the admin or with PUT /api/v1/flavors/"
                       f"{default_flavor})")
    for node in nodes:
        for flavor, _resource in node.quota:
            if flavor not in known:
                node.obj.fail("spec", f"unknown flavor {flavor!r} (define it first: a Kueue "
                              "ResourceFlavor, the admin, or POST /api/v1/flavors)")
    defs = build_tree(nodes)
    replaced = tree_replace(queues=defs, flavors=flavors, prune=prune)
    if dry_run:
        transaction.set_rollback(True)
    return ImportResult(system=system, replaced=replaced, skipped=skipped, dry_run=dry_run)


def quotas_export(fmt: str, *, kueue_version: str = "v1beta2") -> str:
    """The stored tree as a multi-document YAML stream of `fmt` manifests."""
    if fmt not in FORMATS:
        raise ValidationError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    tree = export_tree()
    if fmt == "kueue":
        docs = kueue.write(tree, list(Flavor.objects.order_by("name")), version=kueue_version)
    elif fmt == "volcano":
        docs = volcano.write(tree, fleet_capacity())
    else:
        docs = koordinator.write(tree, fleet_capacity())
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
