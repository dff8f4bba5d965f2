"""Load and validate a scenario file (SCENARIO-FORMAT.md) into engine dataclasses.

Every problem is collected (one line each, naming the queue, key or workload and the numbers)
and raised together as `ScenarioError`; nothing runs on an invalid scenario. The tree rules
are `quotas.tree_rules.validate_tree`, the same code the admin and the API use. No database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quotas import tree_rules
from scheduling.engine import (
    DEFAULT_PRIORITY_CLASSES,
    ClusterSpec,
    DisruptionBudget,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    PriorityClassSpec,
    QueueSpec,
    Settings,
    WorkloadSpec,
)

TOP_KEYS = {"name", "until", "settings", "flavors", "priority_classes", "clusters", "queues",
            "workloads", "disruption_budgets", "events"}
TOP_REQUIRED = {"until", "flavors", "clusters", "queues", "workloads"}
SETTINGS_KEYS = {"reclaim_cooldown_s", "starvation_s", "borrow_score", "strategy",
                 "cycle_interval_s", "pods_ready_timeout_s", "min_cluster_health",
                 "cpu_per_gpu_reserved", "repayment_window_s", "termination_grace_s",
                 "score_weights", "max_depth"}
WORKLOAD_KEYS = {"name", "queue", "submit_at", "duration_s", "priority_class", "preemptible",
                 "checkpoint", "termination_grace_s", "strategy", "dataset", "topology",
                 "start_delay_s", "cancel_at", "labels", "pods"}
POD_KEYS = {"count", "flavors", "gpus", "cpu", "memory_gib", "gpu_memory_gib"}
NODE_KEYS = {"count", "flavor", "gpus", "cpu", "memory_gib", "rack"}
CLUSTER_KEYS = {"name", "region", "health", "price", "datasets", "nodes"}
QUEUE_KEYS = {"name", "quota", "children", "strategy"}
STRATEGIES = ("binpack", "spread")


class ScenarioError(Exception):
    """An invalid scenario: `problems` has one line per broken rule."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class SimWorkload:
    """A workload of the timeline: the engine's view plus what only the simulator needs."""

    spec: WorkloadSpec
    duration_s: float | None
    start_delay_s: float = 0.0
    cancel_at: float | None = None


@dataclass(frozen=True)
class FleetEvent:
    """A change to the fleet at `at`: a cluster's health and/or nodes down for a flavor."""

    at: float
    cluster: str
    health: float | None = None
    flavor: str | None = None
    nodes_down: int | None = None


@dataclass
class Scenario:
    """A validated scenario, ready for `run_scenario`."""

    name: str
    until: float
    settings: Settings
    flavors: tuple[FlavorSpec, ...]
    priority_classes: dict[str, PriorityClassSpec]
    clusters: tuple[ClusterSpec, ...]
    queues: tuple[QueueSpec, ...]
    leaves: dict[str, str]  # queue name -> path
    workloads: list[SimWorkload]
    budgets: tuple[DisruptionBudget, ...] = ()
    events: list[FleetEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class _Checker:
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


def read_file(path: str | Path) -> Any:
    """Read YAML (C loader) or JSON (by the `.json` suffix)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            if p.suffix.lower() == ".json":
                return json.load(fh)
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            return yaml.load(fh, Loader=loader)  # noqa: S506 - a safe loader
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScenarioError([f"{path}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: "
                             f"{first}"]) from exc


def load_scenario(source: str | Path | Mapping[str, Any]) -> Scenario:
    """Load a scenario from a file path or an already-parsed mapping; raise ScenarioError."""
    default_name = "scenario"
    if isinstance(source, str | Path):
        default_name = Path(source).stem
        data = read_file(source)
    else:
        data = source
    c = _Checker()
    if not c.keys(data, TOP_KEYS, TOP_REQUIRED, "scenario"):
        raise ScenarioError(c.problems)
    name = c.text(data, "name", "scenario", default_name) or default_name
    until = c.num(data, "until", "scenario", 0.0, lo=0.0) or 0.0
    settings, max_depth = _settings(c, data.get("settings") or {})
    flavors = _flavors(c, c.items(data, "flavors", "scenario"))
    fnames = {f.name for f in flavors}
    classes = _classes(c, data)
    clusters = _clusters(c, c.items(data, "clusters", "scenario"), fnames)
    queues, leaves, warnings = _queues(c, c.items(data, "queues", "scenario"), fnames,
                                       clusters, max_depth)
    workloads = _workloads(c, c.items(data, "workloads", "scenario"), fnames, classes, leaves,
                           settings)
    budgets = _budgets(c, c.items(data, "disruption_budgets", "scenario"))
    events = _events(c, c.items(data, "events", "scenario"), clusters, fnames)
    if c.problems:
        raise ScenarioError(c.problems)
    return Scenario(name=name, until=until, settings=settings, flavors=tuple(flavors),
                    priority_classes=classes, clusters=tuple(clusters), queues=tuple(queues),
                    leaves=leaves, workloads=workloads, budgets=tuple(budgets), events=events,
                    warnings=warnings)


def _label(obj: Any, fallback: str, kind: str) -> str:
    """Name an item by its own name when it has one ("workload w1"), else by position."""
    if isinstance(obj, Mapping) and isinstance(obj.get("name"), str) and obj["name"]:
        return f"{kind} {obj['name']}"
    return fallback


def _settings(c: _Checker, raw: Any) -> tuple[Settings, int]:
    d = Settings()
    if not c.keys(raw, SETTINGS_KEYS, set(), "settings"):
        return d, tree_rules.DEFAULT_MAX_DEPTH
    w = "settings"
    bs = raw.get("borrow_score") or {}
    aw, rw = d.attainment_weight, d.repayment_weight
    if c.keys(bs, {"attainment_weight", "repayment_weight"}, set(), "settings.borrow_score"):
        aw = c.num(bs, "attainment_weight", "settings.borrow_score", aw) or 0.0
        rw = c.num(bs, "repayment_weight", "settings.borrow_score", rw) or 0.0
    sw = raw.get("score_weights") or {}
    wf, wa, wh, wc = d.w_fit, d.w_affinity, d.w_health, d.w_cost
    if c.keys(sw, {"fit", "affinity", "health", "cost"}, set(), "settings.score_weights"):
        wf = c.num(sw, "fit", "settings.score_weights", wf) or 0.0
        wa = c.num(sw, "affinity", "settings.score_weights", wa) or 0.0
        wh = c.num(sw, "health", "settings.score_weights", wh) or 0.0
        wc = c.num(sw, "cost", "settings.score_weights", wc) or 0.0
    interval = c.num(raw, "cycle_interval_s", w, d.cycle_interval_s) or d.cycle_interval_s
    if interval <= 0:
        c.problems.append(f"settings: cycle_interval_s {interval} must be > 0")
    max_depth = int(c.num(raw, "max_depth", w, tree_rules.DEFAULT_MAX_DEPTH, lo=1.0,
                          integer=True) or tree_rules.DEFAULT_MAX_DEPTH)

    def n(key: str, default: float, **kw: Any) -> float:
        v = c.num(raw, key, w, default, **kw)
        return default if v is None else v

    return Settings(
        reclaim_cooldown_s=n("reclaim_cooldown_s", d.reclaim_cooldown_s),
        starvation_s=n("starvation_s", d.starvation_s),
        attainment_weight=aw, repayment_weight=rw,
        strategy=c.text(raw, "strategy", w, d.strategy, STRATEGIES),
        cycle_interval_s=interval,
        pods_ready_timeout_s=n("pods_ready_timeout_s", d.pods_ready_timeout_s),
        min_cluster_health=n("min_cluster_health", d.min_cluster_health, hi=1.0),
        cpu_per_gpu_reserved=n("cpu_per_gpu_reserved", d.cpu_per_gpu_reserved),
        repayment_window_s=n("repayment_window_s", d.repayment_window_s),
        termination_grace_s=n("termination_grace_s", d.termination_grace_s),
        w_fit=wf, w_affinity=wa, w_health=wh, w_cost=wc,
    ), max_depth


def _flavors(c: _Checker, raw: list[Any]) -> list[FlavorSpec]:
    out: list[FlavorSpec] = []
    seen: set[str] = set()
    for i, f in enumerate(raw):
        where = f"flavors[{i}]"
        if not c.keys(f, {"name", "gpu_memory_gib"}, {"name"}, where):
            continue
        name = c.text(f, "name", where)
        if not name:
            continue
        if name in seen:
            c.problems.append(f"flavor {name}: defined twice")
            continue
        seen.add(name)
        out.append(FlavorSpec(name, c.num(f, "gpu_memory_gib", f"flavor {name}", None)))
    return out


def _classes(c: _Checker, data: Mapping[str, Any]) -> dict[str, PriorityClassSpec]:
    if "priority_classes" not in data:
        return {p.name: p for p in DEFAULT_PRIORITY_CLASSES}
    out: dict[str, PriorityClassSpec] = {}
    for i, p in enumerate(c.items(data, "priority_classes", "scenario")):
        where = f"priority_classes[{i}]"
        if not c.keys(p, {"name", "value", "can_preempt"}, {"name", "value"}, where):
            continue
        name = c.text(p, "name", where)
        if name in out:
            c.problems.append(f"priority class {name}: defined twice")
        value = c.num(p, "value", f"priority class {name}", 0.0, lo=None, integer=True)
        out[name] = PriorityClassSpec(name, int(value or 0),
                                      c.boolean(p, "can_preempt", f"priority class {name}", False))
    return out


def _clusters(c: _Checker, raw: list[Any], flavors: set[str]) -> list[ClusterSpec]:
    out: list[ClusterSpec] = []
    seen: set[str] = set()
    for i, cl in enumerate(raw):
        where = _label(cl, f"clusters[{i}]", "cluster")
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
            cpu = c.num(n, "cpu", nw, 0.0) or 0.0
            mem = c.num(n, "memory_gib", nw, 0.0) or 0.0
            rack = c.text(n, "rack", nw)
            for _ in range(count):
                k = index.get(flavor, 0)
                index[flavor] = k + 1
                nodes.append(NodeSpec(f"{name}-{flavor}-{k}", flavor, gpus, cpu, mem, rack))
        out.append(ClusterSpec(
            name=name, nodes=tuple(nodes), region=c.text(cl, "region", cw),
            health=c.num(cl, "health", cw, 1.0, hi=1.0) or 0.0,
            price=c.num(cl, "price", cw, 1.0) or 0.0, datasets=frozenset(datasets)))
    return out


def _queues(c: _Checker, raw: list[Any], flavors: set[str], clusters: list[ClusterSpec],
            max_depth: int) -> tuple[list[QueueSpec], dict[str, str], list[str]]:
    specs: list[tree_rules.QueueSpec] = []
    strategies: dict[str, str] = {}
    leaves: dict[str, str] = {}
    paths: dict[str, str] = {}

    def walk(items: list[Any], parent: str | None, where: str) -> None:
        for i, q in enumerate(items):
            qw = _label(q, f"{where}[{i}]", "queue")
            if not c.keys(q, QUEUE_KEYS, {"name"}, qw):
                continue
            name = c.text(q, "name", qw)
            if not name or "/" in name:
                c.problems.append(f"{qw}: queue name {name!r} must be non-empty without '/'")
                continue
            if name in paths:
                c.problems.append(f"queue {name}: name used twice (names are unique)")
                continue
            path = f"{parent}/{name}" if parent else name
            paths[name] = path
            strategies[path] = c.text(q, "strategy", f"queue {path}", "", STRATEGIES)
            quota: dict[tuple[str, str], tree_rules.QuotaSpec] = {}
            raw_q = q.get("quota") or {}
            if not isinstance(raw_q, Mapping):
                c.problems.append(f"queue {path}: quota must be a mapping of flavors")
                raw_q = {}
            for flavor, per_res in raw_q.items():
                if flavor not in flavors:
                    c.problems.append(f"queue {path}: unknown flavor {flavor!r}")
                    continue
                if not isinstance(per_res, Mapping):
                    c.problems.append(f"queue {path} {flavor}: expected resources")
                    continue
                for res, vals in per_res.items():
                    kw = f"queue {path} {flavor}/{res}"
                    if res not in tree_rules.RESOURCES:
                        c.problems.append(f"{kw}: unknown resource (one of "
                                          f"{', '.join(tree_rules.RESOURCES)})")
                        continue
                    if not c.keys(vals, {"min", "max", "lendable"}, set(), kw):
                        continue
                    quota[(flavor, res)] = tree_rules.QuotaSpec(
                        min=c.num(vals, "min", kw, None, lo=None),
                        max=c.num(vals, "max", kw, None, lo=None),
                        lendable=c.num(vals, "lendable", kw, None, lo=None))
            specs.append(tree_rules.QueueSpec(path=path, parent=parent, quota=quota))
            kids = c.items(q, "children", f"queue {path}")
            if kids:
                walk(kids, path, f"queue {path} children")
            else:
                leaves[name] = path

    walk(raw, None, "queues")
    capacity: dict[tuple[str, str], float] = {}
    for cl in clusters:
        for n in cl.nodes:
            for res, v in (("gpu", n.gpus), ("cpu", n.cpu), ("memory", n.memory_gib)):
                capacity[(n.flavor, res)] = capacity.get((n.flavor, res), 0.0) + v
    report = tree_rules.validate_tree(specs, flavors=flavors, fleet_capacity=capacity,
                                      max_depth=max_depth)
    c.problems.extend(p.message for p in report.errors)
    out = []
    for spec in specs:
        resolved = report.resolved.get(spec.path, {})
        quota = {key: KeyQuota(min=float(r.min), max=None if r.max is None else float(r.max),
                               lendable=float(r.lendable)) for key, r in resolved.items()}
        out.append(QueueSpec(spec.path, spec.parent, quota, strategies.get(spec.path, "")))
    return out, leaves, [p.message for p in report.warnings]


def _workloads(c: _Checker, raw: list[Any], flavors: set[str],
               classes: Mapping[str, PriorityClassSpec], leaves: Mapping[str, str],
               settings: Settings) -> list[SimWorkload]:
    out: list[SimWorkload] = []
    seen: set[str] = set()
    for i, w in enumerate(raw):
        where = _label(w, f"workloads[{i}]", "workload")
        if not c.keys(w, WORKLOAD_KEYS, {"name", "queue", "pods"}, where):
            continue
        name = c.text(w, "name", where)
        ww = f"workload {name}"
        if not name:
            c.problems.append(f"{where}: empty name")
        elif name in seen:
            c.problems.append(f"{ww}: name used twice")
        seen.add(name)
        queue = c.text(w, "queue", ww)
        if "queue" in w and queue not in leaves:
            c.problems.append(f"{ww}: queue {queue!r} is not a leaf queue of the tree")
        pc_name = c.text(w, "priority_class", ww, "training")
        pc = classes.get(pc_name)
        if pc is None:
            c.problems.append(f"{ww}: unknown priority class {pc_name!r}")
        topo = w.get("topology") or {}
        same = ""
        if c.keys(topo, {"same"}, set(), f"{ww} topology"):
            same = c.text(topo, "same", f"{ww} topology", "", ("rack",))
        labels = w.get("labels") or {}
        if not isinstance(labels, Mapping):
            c.problems.append(f"{ww}: labels must be a mapping")
            labels = {}
        pod_sets: list[PodSetSpec] = []
        raw_pods = c.items(w, "pods", ww)
        if "pods" in w and not raw_pods:
            c.problems.append(f"{ww}: pods is empty")
        for j, ps in enumerate(raw_pods):
            pw = f"{ww} pods[{j}]"
            if not c.keys(ps, POD_KEYS, {"flavors"}, pw):
                continue
            fl = ps.get("flavors")
            if isinstance(fl, str):
                fl = [fl]
            if not isinstance(fl, list) or not fl:
                c.problems.append(f"{pw}: flavors must be a non-empty list")
                fl = []
            for f in fl:
                if f not in flavors:
                    c.problems.append(f"{pw}: unknown flavor {f!r}")
            count = c.num(ps, "count", pw, 1.0, lo=1.0, integer=True) or 1.0
            pod_sets.append(PodSetSpec(
                count=int(count), flavors=tuple(str(f) for f in fl),
                gpus=int(c.num(ps, "gpus", pw, 0.0, integer=True) or 0),
                cpu=c.num(ps, "cpu", pw, 0.0) or 0.0,
                memory_gib=c.num(ps, "memory_gib", pw, 0.0) or 0.0,
                gpu_memory_gib=c.num(ps, "gpu_memory_gib", pw, None)))
        spec = WorkloadSpec(
            name=name, queue=leaves.get(queue, queue), pod_sets=tuple(pod_sets),
            submitted_at=c.num(w, "submit_at", ww, 0.0) or 0.0,
            priority=pc.value if pc else 0, priority_class=pc_name,
            can_preempt=pc.can_preempt if pc else False,
            preemptible=c.boolean(w, "preemptible", ww, True),
            checkpoint=c.boolean(w, "checkpoint", ww, True),
            termination_grace_s=c.num(w, "termination_grace_s", ww,
                                      settings.termination_grace_s),
            strategy=c.text(w, "strategy", ww, "", STRATEGIES),
            dataset=c.text(w, "dataset", ww), topology_same=same,
            labels={str(k): str(v) for k, v in labels.items()})
        duration = c.num(w, "duration_s", ww, None)
        cancel = c.num(w, "cancel_at", ww, None)
        if cancel is not None and cancel < spec.submitted_at:
            c.problems.append(f"{ww}: cancel_at {cancel:g} < submit_at {spec.submitted_at:g}")
        out.append(SimWorkload(spec, duration, c.num(w, "start_delay_s", ww, 0.0) or 0.0,
                               cancel))
    return out


def _budgets(c: _Checker, raw: list[Any]) -> list[DisruptionBudget]:
    out = []
    for i, b in enumerate(raw):
        where = f"disruption_budgets[{i}]"
        if not c.keys(b, {"selector", "min_available", "name"}, {"selector", "min_available"},
                      where):
            continue
        sel = b.get("selector")
        if not isinstance(sel, Mapping) or not sel:
            c.problems.append(f"{where}: selector must be a non-empty mapping of labels")
            continue
        out.append(DisruptionBudget(
            selector={str(k): str(v) for k, v in sel.items()},
            min_available=int(c.num(b, "min_available", where, 0.0, integer=True) or 0),
            name=c.text(b, "name", where, f"budget-{i}")))
    return out


def _events(c: _Checker, raw: list[Any], clusters: list[ClusterSpec],
            flavors: set[str]) -> list[FleetEvent]:
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
