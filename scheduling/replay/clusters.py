"""The scenario's clusters (their nodes, named `<cluster>-<flavor>-<n>`) and fleet events."""

from __future__ import annotations

from typing import Any

from scheduling.engine import ClusterSpec, NodeSpec
from scheduling.replay.checker import Checker, label
from scheduling.replay.scenario import FleetEvent

NODE_KEYS = {"count", "flavor", "gpus", "cpu", "memory_gib", "rack", "resources"}
CLUSTER_KEYS = {"name", "region", "health", "price", "datasets", "nodes"}


def parse_clusters(c: Checker, raw: list[Any], flavors: set[str]) -> list[ClusterSpec]:
    """The `clusters` list: one `NodeSpec` per node (`count` expands a node line)."""
    out: list[ClusterSpec] = []
    seen: set[str] = set()
    for i, cl in enumerate(raw):
        where = label(cl, f"clusters[{i}]", "cluster")
        if not c.keys(cl, CLUSTER_KEYS, {"name", "nodes"}, where):
            continue
        name = c.text(cl, "name", where)
        if name in seen:
            c.problems.append(f"cluster {name}: defined twice")
        seen.add(name)
        cw = f"cluster {name}"
        datasets = cl.get("datasets") or []
        if not isinstance(datasets, list) or not all(isinstance(d, str) for d in datasets):
            c.problems.append(f"{cw}: datasets must be a list of names")
            datasets = []
        nodes: list[NodeSpec] = []
        index: dict[str, int] = {}
        for j, n in enumerate(c.items(cl, "nodes", cw)):
            nw = f"{cw} nodes[{j}]"
            if not c.keys(n, NODE_KEYS, {"flavor"}, nw):
                continue
            flavor = c.text(n, "flavor", nw)
            if "flavor" not in n:
                continue
            if flavor not in flavors:
                c.problems.append(f"{nw}: unknown flavor {flavor!r}")
                continue
            count = int(c.num(n, "count", nw, 1.0, integer=True) or 0)
            gpus = int(c.num(n, "gpus", nw, 0.0, integer=True) or 0)
            cpu = c.qty(n, "cpu", nw, 0.0, "cpu") or 0.0
            mem = c.qty(n, "memory_gib", nw, 0.0, "memory") or 0.0
            rack = c.text(n, "rack", nw)
            extended = c.resources(n, nw)
            for _ in range(count):
                k = index.get(flavor, 0)
                index[flavor] = k + 1
                nodes.append(NodeSpec(f"{name}-{flavor}-{k}", flavor, gpus, cpu, mem, rack,
                                      resources=extended))
        out.append(ClusterSpec(
            name=name, nodes=tuple(nodes), region=c.text(cl, "region", cw),
            health=c.num(cl, "health", cw, 1.0, hi=1.0) or 0.0,
            price=c.num(cl, "price", cw, 1.0) or 0.0, datasets=frozenset(datasets)))
    return out


def parse_events(c: Checker, raw: list[Any], clusters: list[ClusterSpec],
                 flavors: set[str]) -> list[FleetEvent]:
    """The `events` list: health changes and nodes down, checked against the clusters."""
    names = {cl.name: cl for cl in clusters}
    out = []
    for i, e in enumerate(raw):
        where = f"events[{i}]"
        if not c.keys(e, {"at", "cluster", "health", "flavor", "nodes_down"},
                      {"at", "cluster"}, where):
            continue
        cluster = c.text(e, "cluster", where)
        if cluster not in names:
            c.problems.append(f"{where}: unknown cluster {cluster!r}")
            continue
        health = c.num(e, "health", where, None, hi=1.0)
        flavor = e.get("flavor")
        down = c.num(e, "nodes_down", where, None, integer=True)
        if health is None and down is None:
            c.problems.append(f"{where}: nothing changes (give health or flavor + nodes_down)")
        if down is not None:
            if flavor not in flavors:
                c.problems.append(f"{where}: nodes_down needs a known flavor, got {flavor!r}")
                continue
            have = sum(1 for n in names[cluster].nodes if n.flavor == flavor)
            if down > have:
                c.problems.append(f"{where}: nodes_down {int(down)} > {have} {flavor} nodes in "
                                  f"cluster {cluster}")
                continue
        elif flavor is not None:
            c.problems.append(f"{where}: flavor given without nodes_down")
        out.append(FleetEvent(at=c.num(e, "at", where, 0.0) or 0.0, cluster=cluster,
                              health=health, flavor=flavor if down is not None else None,
                              nodes_down=int(down) if down is not None else None))
    return out
