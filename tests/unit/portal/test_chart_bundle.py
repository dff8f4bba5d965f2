"""The vendored plotly bundle is the basic one (scatter, bar, pie): every chart the portal
builds must use only those trace types, or it would draw nothing in the browser."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHART_MODULES = ["portal/pages/charts.py", "billing/charts.py"]
BASIC_TRACES = {"scatter", "bar", "pie"}


def _trace_types(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (isinstance(key, ast.Constant) and key.value == "type"
                        and isinstance(value, ast.Constant)):
                    found.add(value.value)
    return found


def test_charts_use_only_the_basic_bundles_traces():
    used = set().union(*(_trace_types(ROOT / m) for m in CHART_MODULES))
    assert used, "no chart trace found: the modules moved?"
    assert used <= BASIC_TRACES, f"not in plotly-basic.min.js: {sorted(used - BASIC_TRACES)}"


def test_the_basic_bundle_is_vendored_and_the_full_one_is_gone():
    vendor = ROOT / "static" / "vendor"
    head = (vendor / "plotly-basic.min.js").read_text()[:200]
    assert "plotly.js (basic - minified)" in head
    assert not (vendor / "plotly.min.js").exists()
    partial = (ROOT / "templates/portal/partials/charts_script.html").read_text()
    assert "plotly-basic.min.js' %}\" defer" in partial
