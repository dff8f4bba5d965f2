"""Load and validate a scenario file (SCENARIO-FORMAT.md) into engine dataclasses.

Every problem is collected (one line each, naming the queue, key or workload and the numbers)
and raised together as `ScenarioError`; nothing runs on an invalid scenario. The tree rules
are `quotas.tree_rules.validate_tree`, the same code the admin and the API use. No database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from quotas import tree_rules
from scheduling.engine import (
    DEFAULT_PRIORITY_CLASSES,
    DisruptionBudget,
    FlavorSpec,
    PriorityClassSpec,
    Settings,
)
from scheduling.replay.checker import STRATEGIES, Checker
from scheduling.replay.clusters import parse_clusters, parse_events
from scheduling.replay.queues import parse_queues
from scheduling.replay.scenario import Scenario, ScenarioError
from scheduling.replay.workloads import parse_workloads

TOP_KEYS = {"name", "until", "settings", "flavors", "priority_classes", "clusters", "queues",
            "workloads", "disruption_budgets", "events"}
TOP_REQUIRED = {"until", "flavors", "clusters", "queues", "workloads"}
SETTINGS_KEYS = {"reclaim_cooldown_s", "starvation_s", "borrow_score", "strategy",
                 "cycle_interval_s", "pods_ready_timeout_s", "min_cluster_health",
                 "cpu_per_gpu_reserved", "repayment_window_s", "termination_grace_s",
                 "score_weights", "max_depth"}


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
    c = Checker()
    if not c.keys(data, TOP_KEYS, TOP_REQUIRED, "scenario"):
        raise ScenarioError(c.problems)
    name = c.text(data, "name", "scenario", default_name) or default_name
    until = c.num(data, "until", "scenario", 0.0, lo=0.0) or 0.0
    settings, max_depth = _settings(c, data.get("settings") or {})
    flavors = _flavors(c, c.items(data, "flavors", "scenario"))
    fnames = {f.name for f in flavors}
    classes = _classes(c, data)
    clusters = parse_clusters(c, c.items(data, "clusters", "scenario"), fnames)
    queues, leaves, warnings = parse_queues(c, c.items(data, "queues", "scenario"), fnames,
                                            clusters, max_depth)
    workloads = parse_workloads(c, c.items(data, "workloads", "scenario"), fnames, classes,
                                leaves, settings)
    budgets = _budgets(c, c.items(data, "disruption_budgets", "scenario"))
    events = parse_events(c, c.items(data, "events", "scenario"), clusters, fnames)
    if c.problems:
        raise ScenarioError(c.problems)
    return Scenario(name=name, until=until, settings=settings, flavors=tuple(flavors),
                    priority_classes=classes, clusters=tuple(clusters), queues=tuple(queues),
                    leaves=leaves, workloads=workloads, budgets=tuple(budgets), events=events,
                    warnings=warnings)


def _settings(c: Checker, raw: Any) -> tuple[Settings, int]:
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


def _flavors(c: Checker, raw: list[Any]) -> list[FlavorSpec]:
    out: list[FlavorSpec] = []
    seen: set[str] = set()
    for i, f in enumerate(raw):
        where = f"flavors[{i}]"
        if not c.keys(f, {"name", "gpu_memory_gib", "gpu_equivalents"}, {"name"}, where):
            continue
        name = c.text(f, "name", where)
        if not name:
            continue
        if name in seen:
            c.problems.append(f"flavor {name}: defined twice")
            continue
        seen.add(name)
        equivalents = c.resources({"resources": f.get("gpu_equivalents")},
                                  f"flavor {name} gpu_equivalents")
        out.append(FlavorSpec(name, c.qty(f, "gpu_memory_gib", f"flavor {name}", None, "memory"),
                              gpu_equivalents=dict(equivalents)))
    return out


def _classes(c: Checker, data: Mapping[str, Any]) -> dict[str, PriorityClassSpec]:
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


def _budgets(c: Checker, raw: list[Any]) -> list[DisruptionBudget]:
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
