"""deploy/grafana/allot-dashboard.json and deploy/prometheus/allot-alerts.yml: every metric
their PromQL names is one /metrics exports, with labels it has; promtool checks the rules and
runs their unit tests (allot-alerts.test.yml)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from portal.monitoring import REGISTRY

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy/grafana/allot-dashboard.json"
RULES = ROOT / "deploy/prometheus/allot-alerts.yml"
NAME = re.compile(r"\b(allot_[a-zA-Z0-9_]+)\b(\s*\{([^}]*)\})?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


@pytest.fixture
def exported(db) -> dict[str, set[str]]:
    """Each sample name /metrics exports (on an empty database: every family is there,
    samples or not) -> its label names."""
    names: dict[str, set[str]] = {}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "gauge": ("",)}
    for family in REGISTRY.collect():
        labels = set(family._labelnames)  # type: ignore[attr-defined]
        for suffix in suffixes[family.type]:
            names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


def dashboard_exprs() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in data["templating"]["list"] if v["type"] == "query"]
    return exprs


def rule_exprs() -> list[str]:
    data = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in data["groups"] for r in g["rules"]]


def problems(exprs: list[str], exported: dict[str, set[str]]) -> list[str]:
    """Unknown metrics, and label names a selector or a grouping uses that none of the
    expression's metrics has."""
    out = []
    for expr in exprs:
        metrics = NAME.findall(expr)
        known: set[str] = set()
        for name, _, matchers in metrics:
            if name not in exported:
                out.append(f"{expr}: {name} is not exported")
                continue
            known |= exported[name]
            for label in MATCHER.findall(matchers):
                if label not in exported[name]:
                    out.append(f"{expr}: {name} has no label {label}")
        for group in GROUPING.findall(expr):
            for label in filter(None, (g.strip() for g in group.split(","))):
                if label not in known:
                    out.append(f"{expr}: no metric of it has the label {label}")
    return out


def test_the_dashboard_charts_only_what_metrics_exports(exported):
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    assert problems(exprs, exported) == []
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert {"Scheduling", "Clusters", "Spend and budgets"} <= {
        p["title"] for p in panels if p["type"] == "row"}


def test_the_alert_rules_use_only_what_metrics_exports(exported):
    exprs = rule_exprs()
    assert len(exprs) >= 10
    assert problems(exprs, exported) == []


def test_the_check_itself_finds_an_unknown_metric_and_label(exported):
    found = problems(['sum by (queue, zone) (allot_pending_workload{queue="a"})',
                      'allot_pending_workloads{cluster="a"}'], exported)
    assert found == [
        'sum by (queue, zone) (allot_pending_workload{queue="a"}): allot_pending_workload is '
        'not exported',
        'sum by (queue, zone) (allot_pending_workload{queue="a"}): no metric of it has the '
        'label queue',
        'sum by (queue, zone) (allot_pending_workload{queue="a"}): no metric of it has the '
        'label zone',
        'allot_pending_workloads{cluster="a"}: allot_pending_workloads has no label cluster',
    ]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_checks_the_rules_and_runs_their_tests():
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 12 rules found" in checked.stdout
    tested = subprocess.run(["promtool", "test", "rules", "allot-alerts.test.yml"],
                            cwd=RULES.parent, capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
