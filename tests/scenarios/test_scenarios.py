"""Scenario files with hand-computed expectations, replayed through the scenario runner.

Every `*.yaml` / `*.json` file in this folder is a scenario (SCENARIO-FORMAT.md) whose expected
outcome sits in the same file under `x-expect` (the runner ignores `x-` keys). Valid scenarios
run through the Python API (`load_scenario` + `run_scenario`); invalid ones must raise
`ScenarioError` with one problem per broken rule. A few of each also go through the real
command (`manage.py simulate`) in a subprocess to check exit codes, stdout JSON and stderr.

`x-expect` keys:
- `exit`: 0 (default) or 2 (invalid scenario).
- `error_lines`: for exit 2, the exact number of problems (stderr lines).
- `errors`: for exit 2, a list of groups of substrings; each group must match a distinct line.
- `workloads.<name>`: `state`, `finished_at`, `admissions` and `preemptions` (lists compared
  item by item, length exact, each item's listed keys only), `reasons` (an ordered subsequence
  of the actual reasons; items have `code`, optional `at` and `contains`),
  `reason_codes_absent`.
- `metrics.<name>`: a number, or `{approx: x, tol: t}`, or `{min: a, max: b}`.
- `warnings`: groups of substrings, each matching a distinct `warning:` line on the command's
  stderr (tree warnings W1-W3 do not stop a scenario).
Times may be a number or `{min: a, max: b}`. In `contains`, a number matches as a whole number
("8" does not match "80"; it does match "8.0").

A case whose expectation was re-checked against the rules and that fails because the engine is
wrong is listed in ENGINE_XFAIL with what is wrong (strict: it fails loudly once fixed).

Every valid scenario is also replayed as the workers run it (`run_scenario(..., rebuild=True)`:
the engine rebuilt from a snapshot before every cycle), which must meet the same `x-expect` and
give the same admissions, preemptions, states, finish times and metrics as the live replay.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCENARIO_FILES = sorted(
    p for p in HERE.iterdir() if p.suffix in {".yaml", ".yml", ".json"} and p.is_file()
)

# file stem -> what the engine gets wrong.
ENGINE_XFAIL: dict[str, str] = {}

# Reason codes that only the portal side produces (admission policies, budgets): the scenario
# format has no policies or budgets, so no scenario can show them.
PORTAL_ONLY_CODES = {"POLICY_DENIED", "BUDGET_EXCEEDED"}
ALL_CODES = {
    "QUOTA_MAX", "QUOTA_BORROW_UNAVAILABLE", "NON_PREEMPTIBLE_BEYOND_MIN", "COOLDOWN",
    "NO_CAPACITY", "GPU_MEMORY_INSUFFICIENT", "TOPOLOGY_UNSATISFIABLE", "FLAVOR_UNAVAILABLE",
    "CLUSTER_UNHEALTHY", "POLICY_DENIED", "BUDGET_EXCEEDED", "WAITING_FOR_PREEMPTION",
    "PODS_READY_TIMEOUT", "INVALID_REQUEST",
}

# Valid scenarios that also go through the real command (stdout JSON, --out, exit 0).
COMMAND_RUNS = ("04-borrow-and-reclaim", "32-warnings-still-run")

TIME_TOL = 1e-6
METRIC_TOL = 5e-4


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _expectation(path: Path) -> dict[str, Any]:
    """The file's `x-expect`; a document that is not a mapping must be refused with one line."""
    try:
        doc = _read(path)
    except (yaml.YAMLError, json.JSONDecodeError):
        return {"exit": 2, "error_lines": 1}
    if not isinstance(doc, dict):
        return {"exit": 2, "error_lines": 1}
    return doc.get("x-expect") or {}


def _params(files: list[Path]) -> list[Any]:
    out = []
    for path in files:
        marks = []
        if path.stem in ENGINE_XFAIL:
            marks.append(pytest.mark.xfail(strict=True, reason=ENGINE_XFAIL[path.stem]))
        out.append(pytest.param(path, id=path.stem, marks=marks))
    return out


VALID = [p for p in SCENARIO_FILES if _expectation(p).get("exit", 0) == 0]
INVALID = [p for p in SCENARIO_FILES if _expectation(p).get("exit", 0) == 2]


# ---------------------------------------------------------------------------- comparison


def _num_ok(actual: Any, expected: Any, tol: float) -> bool:
    if isinstance(expected, dict):
        if not isinstance(actual, int | float) or isinstance(actual, bool):
            return False
        if "approx" in expected:
            return abs(actual - expected["approx"]) <= expected.get("tol", tol)
        lo, hi = expected.get("min", float("-inf")), expected.get("max", float("inf"))
        return lo - tol <= actual <= hi + tol
    if expected is None or actual is None:
        return actual is expected
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual == expected
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return abs(actual - expected) <= tol + 1e-9 * abs(expected)
    return actual == expected


def _token_re(token: str) -> re.Pattern[str]:
    if re.fullmatch(r"-?\d+(\.\d+)?", token):
        # A whole number: "8" must not match "80" or "18", but matches "8.0".
        return re.compile(r"(?<![\d.])" + re.escape(token) + r"(?:\.0+)?(?!\.?\d)")
    return re.compile(re.escape(token))


def _contains_all(text: str, tokens: list[Any]) -> bool:
    return all(_token_re(str(t)).search(text) for t in tokens)


def _compare_items(
    where: str, actual: list[dict], expected: list[dict], problems: list[str]
) -> None:
    if len(actual) != len(expected):
        problems.append(f"{where}: expected {len(expected)} item(s), got {len(actual)}: {actual}")
        return
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        for key, value in want.items():
            if key not in got:
                problems.append(f"{where}[{i}].{key}: missing (item {got})")
            elif key == "at":
                if not _num_ok(got[key], value, TIME_TOL):
                    problems.append(f"{where}[{i}].at: expected {value}, got {got[key]}")
            elif got[key] != value:
                problems.append(f"{where}[{i}].{key}: expected {value!r}, got {got[key]!r}")


def _reason_matches(got: dict, want: dict) -> bool:
    if got.get("code") != want["code"]:
        return False
    if "at" in want and not _num_ok(got.get("at"), want["at"], TIME_TOL):
        return False
    return _contains_all(str(got.get("message", "")), want.get("contains", []))


def _compare_reasons(where: str, actual: list[dict], expected: list[dict],
                     problems: list[str]) -> None:
    pos = 0
    for want in expected:
        while pos < len(actual) and not _reason_matches(actual[pos], want):
            pos += 1
        if pos == len(actual):
            shown = [(r.get("at"), r.get("code"), r.get("message")) for r in actual]
            problems.append(f"{where}: no reason matching {want} (in order) among {shown}")
            return
        pos += 1


def compare(result: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """Every difference between a runner result and an `x-expect`, as readable lines."""
    problems: list[str] = []
    workloads = result.get("workloads", {})
    for name, want in (expect.get("workloads") or {}).items():
        got = workloads.get(name)
        where = f"workloads.{name}"
        if got is None:
            problems.append(f"{where}: missing from the result")
            continue
        if "state" in want and got.get("state") != want["state"]:
            problems.append(f"{where}.state: expected {want['state']!r}, got {got.get('state')!r}")
        if "finished_at" in want and not _num_ok(got.get("finished_at"), want["finished_at"],
                                                 TIME_TOL):
            problems.append(f"{where}.finished_at: expected {want['finished_at']}, "
                            f"got {got.get('finished_at')}")
        for key in ("admissions", "preemptions"):
            if key in want:
                _compare_items(f"{where}.{key}", got.get(key, []), want[key], problems)
        if "reasons" in want:
            _compare_reasons(f"{where}.reasons", got.get("reasons", []), want["reasons"],
                             problems)
        for code in want.get("reason_codes_absent", []):
            hits = [r for r in got.get("reasons", []) if r.get("code") == code]
            if hits:
                problems.append(f"{where}.reasons: {code} must not appear, got {hits}")
    metrics = result.get("metrics", {})
    for name, want in (expect.get("metrics") or {}).items():
        if name not in metrics:
            problems.append(f"metrics.{name}: missing (have {sorted(metrics)})")
        elif not _num_ok(metrics[name], want, METRIC_TOL):
            problems.append(f"metrics.{name}: expected {want}, got {metrics[name]}")
    return problems


def match_errors(lines: list[str], groups: list[list[Any]]) -> list[str]:
    """Each group of substrings must match a distinct line (small bipartite matching)."""
    candidates = [[i for i, line in enumerate(lines) if _contains_all(line, g)] for g in groups]
    used: dict[int, int] = {}

    def assign(g: int, seen: set[int]) -> bool:
        for i in candidates[g]:
            if i in seen:
                continue
            seen.add(i)
            if i not in used or assign(used[i], seen):
                used[i] = g
                return True
        return False

    return [f"no line matches {groups[g]}" for g in range(len(groups)) if not assign(g, set())]


def _explain(path: Path, problems: list[str], result: dict[str, Any] | None = None) -> str:
    text = [f"{path.name}: {len(problems)} difference(s) from x-expect:"]
    text += [f"  - {p}" for p in problems]
    if result is not None:
        names = sorted({p.split(".")[1] for p in problems if p.startswith("workloads.")})
        for name in names:
            record = result.get("workloads", {}).get(name)
            text.append(f"  actual {name}: {json.dumps(record, sort_keys=True)}")
        if any(p.startswith("metrics.") for p in problems):
            text.append(f"  actual metrics: {json.dumps(result.get('metrics'), sort_keys=True)}")
    return "\n".join(text)


# ---------------------------------------------------------------------------- tests


def _runner() -> Any:
    return pytest.importorskip("scheduling.replay")


@pytest.mark.parametrize("path", _params(VALID))
def test_scenario(path: Path) -> None:
    sim = _runner()
    scenario = sim.load_scenario(str(path))
    result = sim.run_scenario(scenario)
    problems = compare(result, _expectation(path))
    assert not problems, _explain(path, problems, result)


def _outcome(result: dict[str, Any]) -> tuple[Any, Any]:
    """What was decided: the reasons aside (a parked group keeps its reason until something
    could change its outcome; an engine rebuilt every cycle gives each one afresh)."""
    return ({name: {k: v for k, v in w.items() if k != "reasons"}
             for name, w in result["workloads"].items()}, result["metrics"])


@pytest.mark.parametrize("path", _params(VALID))
def test_scenario_rebuilt_every_cycle_as_the_workers_do(path: Path) -> None:
    sim = _runner()
    rebuilt = sim.run_scenario(sim.load_scenario(str(path)), rebuild=True)
    problems = compare(rebuilt, _expectation(path))
    assert not problems, _explain(path, problems, rebuilt)
    live = sim.run_scenario(sim.load_scenario(str(path)))
    assert _outcome(rebuilt) == _outcome(live)


@pytest.mark.parametrize("path", _params(INVALID))
def test_invalid_scenario_raises(path: Path) -> None:
    sim = _runner()
    expect = _expectation(path)
    with pytest.raises(sim.ScenarioError) as info:
        sim.load_scenario(str(path))
    lines = [str(p) for p in info.value.problems]
    problems = match_errors(lines, expect.get("errors", []))
    if "error_lines" in expect and len(lines) != expect["error_lines"]:
        problems.append(f"expected {expect['error_lines']} problem(s), got {len(lines)}")
    assert not problems, _explain(path, problems) + "\n  problems: " + json.dumps(lines)


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "simulate", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("path", _params(INVALID))
def test_invalid_scenario_command_exits_2(path: Path) -> None:
    _runner()
    expect = _expectation(path)
    proc = _simulate(str(path))
    assert proc.returncode == 2, f"exit {proc.returncode}; stderr: {proc.stderr}"
    assert proc.stdout.strip() == "", f"nothing may be printed on stdout: {proc.stdout[:500]}"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    problems = match_errors(lines, expect.get("errors", []))
    if "error_lines" in expect and len(lines) != expect["error_lines"]:
        problems.append(f"expected {expect['error_lines']} stderr line(s), got {len(lines)}")
    assert not problems, _explain(path, problems) + "\n  stderr:\n" + proc.stderr


@pytest.mark.parametrize("path", _params([p for p in VALID if p.stem in COMMAND_RUNS]))
def test_command_prints_the_same_json(path: Path) -> None:
    sim = _runner()
    expected = sim.run_scenario(sim.load_scenario(str(path)))
    proc = _simulate(str(path))
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed == json.loads(json.dumps(expected))
    assert printed["scenario"] == _read(path)["name"]
    assert not compare(printed, _expectation(path))
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert not match_errors(warnings, _expectation(path).get("warnings", [])), proc.stderr


def test_command_reads_json_and_writes_out(tmp_path: Path) -> None:
    """The same scenario as JSON (how large traces are fed) gives the same result; --out F
    writes it to F."""
    sim = _runner()
    source = HERE / "01-basic-admit-finish.yaml"
    doc = _read(source)
    as_json = tmp_path / "basic.json"
    as_json.write_text(json.dumps(doc))
    from_yaml = sim.run_scenario(sim.load_scenario(str(source)))
    from_json = sim.run_scenario(sim.load_scenario(str(as_json)))
    assert from_json == from_yaml
    out = tmp_path / "result.json"
    proc = _simulate(str(as_json), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(from_yaml))
    assert not compare(written, doc["x-expect"])


def test_command_forecasts_with_arrivals_or_refuses_a_bad_window() -> None:
    """--eta records eta_at_submit; --eta-arrivals S sets how much of the recent past comes
    again (0: none), --eta-arrivals-repeat K how many times; a negative or non-finite window
    or fewer than one time is refused with the value."""
    _runner()
    source = str(HERE / "01-basic-admit-finish.yaml")
    for window in ("0", "3600"):
        proc = _simulate(source, "--eta", "--eta-arrivals", window)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)["workloads"]
        assert all("eta_at_submit" in w for w in got.values())
    for bad in ("-5", "nan"):
        proc = _simulate(source, "--eta", "--eta-arrivals", bad)
        assert proc.returncode == 2 and proc.stdout == ""
        assert f"--eta-arrivals {float(bad)}: must be 0 or more seconds" in proc.stderr
    proc = _simulate(source, "--eta", "--eta-arrivals-repeat", "0")
    assert proc.returncode == 2 and "--eta-arrivals-repeat 0: must be at least 1" in proc.stderr


def test_command_missing_file_is_refused(tmp_path: Path) -> None:
    _runner()
    proc = _simulate(str(tmp_path / "nope.yaml"))
    assert proc.returncode != 0
    assert "nope.yaml" in proc.stderr


def test_the_suite_covers_every_reason_code() -> None:
    """Each §8 code is expected somewhere, except the portal-only ones."""
    seen: set[str] = set()
    for path in VALID:
        for want in (_expectation(path).get("workloads") or {}).values():
            seen.update(r["code"] for r in want.get("reasons", []))
    assert ALL_CODES - PORTAL_ONLY_CODES - seen == set()
    assert len(SCENARIO_FILES) >= 30


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=[p.stem for p in SCENARIO_FILES])
def test_file_explains_itself(path: Path) -> None:
    """Every scenario file opens with a comment saying what it checks and how."""
    head = path.read_text(encoding="utf-8").splitlines()[:2]
    assert head and all(line.startswith("# ") for line in head), f"{path.name}: {head}"


def test_same_scenario_same_result() -> None:
    """I4 at the runner level: two replays of one file are identical."""
    sim = _runner()
    path = HERE / "26-three-levels-lendable-department.yaml"
    first = sim.run_scenario(sim.load_scenario(str(path)))
    second = sim.run_scenario(sim.load_scenario(str(path)))
    assert first == second
