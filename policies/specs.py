"""Policy definitions as plain data: checking fields, reading and writing YAML, running tests.

No database here, so `policies_test` runs in a policy repository's own CI.

A policy file holds one policy (a mapping) or several (`policies: [...]`); each policy may
carry `tests`, a list of cases:

    tests:
      - name: approved team may use H100s
        input: {request: {flavors: [h100-80g]}, team: {approvals: [h100]}}
        expect: allow            # allow | deny (validate); or a value, below
        message: "..."           # optional: the exact denial message
        message_contains: "..."  # optional
      - input: {...}
        expect: {limit: 16}      # limit; {clusters: [a, b]} placement; {priority_class: x};
                                 # {skip: true}: the policy does not match
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .celexpr import PolicyEvaluationError, check_expression, make_context
from .evaluation import evaluate_request
from .rules import (
    ENFORCE,
    KINDS,
    LIMIT,
    MODES,
    ORDER_MAX,
    ORDER_MIN,
    PLACEMENT,
    PRIORITY,
    VALIDATE,
    PolicySpec,
    run_match,
    run_message,
    run_rule,
)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*/(gpu|cpu|memory)$")
RESERVED_NAMES = ("validate", "new", "try", "violations")
FIELDS = ("name", "description", "kind", "mode", "scope", "order", "key", "match", "rule",
          "message")


class PolicyFileError(Exception):
    """A policy file that cannot be read, with the file and what is wrong."""


def check_fields(data: Mapping[str, Any]) -> dict[str, list[str]]:
    """Field errors of a policy definition (empty when it is valid); CEL errors with position."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    name = str(data.get("name", "") or "")
    if not NAME_RE.fullmatch(name):
        add("name", f"{name!r} is not a valid name (lowercase letters, digits and dashes)")
    elif name in RESERVED_NAMES:
        add("name", f"{name!r} is reserved (it is a page or API path)")
    kind = data.get("kind")
    if kind not in KINDS:
        add("kind", f"{kind!r} is not a kind (one of {', '.join(KINDS)})")
    mode = data.get("mode", "audit")
    if mode not in MODES:
        add("mode", f"{mode!r} is not a mode (one of {', '.join(MODES)})")
    scope = data.get("scope") or []
    if not isinstance(scope, list | tuple) or not all(isinstance(s, str) and s for s in scope):
        add("scope", "scope must be a list of queue paths")
    order = data.get("order", 100)
    if isinstance(order, bool) or not isinstance(order, int):
        add("order", f"order must be an integer, not {order!r}")
    elif not ORDER_MIN <= order <= ORDER_MAX:
        add("order", f"order {order} is out of range: from {ORDER_MIN} to {ORDER_MAX}")
    key = str(data.get("key", "") or "")
    if kind == LIMIT and not KEY_RE.fullmatch(key):
        add("key", f"a limit policy needs the quota key it caps, like a100-80g/gpu (got {key!r})")
    if kind != LIMIT and key:
        add("key", "only limit policies take a key")
    for expr_field, required in (("match", False), ("rule", True), ("message", False)):
        src = str(data.get(expr_field, "") or "")
        if not src.strip():
            if required:
                add(expr_field, "this expression is required")
            continue
        for problem in check_expression(src):
            add(expr_field, str(problem))
    return errors


def normalise(data: Mapping[str, Any]) -> dict[str, Any]:
    """A definition with every field present and defaults applied (as stored and exported)."""
    return {
        "name": str(data.get("name", "")),
        "description": str(data.get("description", "") or "").strip(),
        "kind": data.get("kind"),
        "mode": data.get("mode", "audit") or "audit",
        "scope": list(data.get("scope") or []),
        "order": data.get("order", 100) if data.get("order") is not None else 100,
        "key": str(data.get("key", "") or ""),
        "match": str(data.get("match", "") or "true").strip(),
        "rule": str(data.get("rule", "") or "").strip(),
        "message": str(data.get("message", "") or "").strip(),
    }


def to_spec(data: Mapping[str, Any]) -> PolicySpec:
    """A PolicySpec from a (normalised) definition."""
    d = normalise(data)
    return PolicySpec(
        name=d["name"], kind=d["kind"], rule=d["rule"], match=d["match"], message=d["message"],
        key=d["key"], mode=d["mode"], scope=tuple(d["scope"]), order=d["order"],
        description=d["description"],
    )


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(data: Any) -> str:
    """YAML as people write it: keys in the given order, block scalars for multi-line text."""
    # Wide lines: an expression stays on one line, so a version diff shows what changed.
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10_000)


@dataclass
class PolicyFile:
    """The policies of one file, each with its test cases."""

    path: str
    policies: list[dict[str, Any]] = field(default_factory=list)
    tests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def read_file(path: Path) -> PolicyFile:
    """Parse one YAML file; raise PolicyFileError naming the file and the problem."""
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyFileError(f"{path}: {exc}") from exc
    return read_document(str(path), doc)


def read_document(path: str, doc: Any) -> PolicyFile:
    """The policies and cases of one file's parsed content (`path` names it in errors); raise
    PolicyFileError naming the file and the problem."""
    if isinstance(doc, Mapping) and "policies" in doc:
        items = doc["policies"]
    elif isinstance(doc, Mapping):
        items = [doc]
    else:
        raise PolicyFileError(f"{path}: expected a policy mapping or 'policies: [...]'")
    if not isinstance(items, list):
        raise PolicyFileError(f"{path}: 'policies' must be a list")
    out = PolicyFile(path=str(path))
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise PolicyFileError(f"{path}: policy #{index + 1} is not a mapping")
        tests = item.get("tests") or []
        if not isinstance(tests, list):
            raise PolicyFileError(f"{path}: {item.get('name')}: 'tests' must be a list")
        definition = {k: v for k, v in item.items() if k != "tests"}
        unknown = sorted(set(definition) - set(FIELDS))
        if unknown:
            raise PolicyFileError(
                f"{path}: {item.get('name')}: unknown field(s) {', '.join(unknown)}"
            )
        out.policies.append(definition)
        out.tests[str(item.get("name"))] = list(tests)
    return out


def read_dir(directory: Path) -> list[PolicyFile]:
    """Every *.yaml / *.yml file under `directory` (sorted, recursive)."""
    if not directory.is_dir():
        raise PolicyFileError(f"{directory}: not a directory")
    files = sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml"))
    return [read_file(p) for p in files]


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one test case."""

    policy: str
    case: str
    passed: bool
    detail: str


def run_case(spec: PolicySpec, case: Mapping[str, Any], base: Mapping[str, Any]) -> CaseResult:
    """Run one YAML test case against a policy (its mode is taken as enforce)."""
    from .variables import deep_merge  # noqa: PLC0415 (variables imports Django models)

    name = str(case.get("name") or case.get("expect"))
    variables = deep_merge(base, case.get("input") or {})
    expect = case.get("expect", "allow")
    enforced = PolicySpec(**{**spec.__dict__, "mode": ENFORCE, "scope": ()})

    def result(ok: bool, detail: str) -> CaseResult:
        return CaseResult(spec.name, name, ok, detail)

    if spec.kind in (VALIDATE, PRIORITY) and expect in ("allow", "deny"):
        outcome = evaluate_request([enforced], variables)
        got = "allow" if outcome.allowed else "deny"
        message = outcome.denials[0].message if outcome.denials else ""
        if got != expect:
            return result(False, f"expected {expect}, got {got}" + (f": {message}" if message
                                                                        else ""))
        if "message" in case and message != case["message"]:
            return result(False, f"expected message {case['message']!r}, got {message!r}")
        if "message_contains" in case and str(case["message_contains"]) not in message:
            return result(
                False, f"expected message containing {case['message_contains']!r}, got "
                f"{message!r}")
        return result(True, f"{got}" + (f": {message}" if message else ""))
    if not isinstance(expect, Mapping):
        return result(False, f"expect must be allow, deny or a mapping for a {spec.kind} policy")
    ctx = make_context(variables)
    try:
        matched = run_match(enforced, ctx)
        value = run_rule(enforced, ctx) if matched else None
    except PolicyEvaluationError as exc:
        if expect.get("error"):
            return result(True, f"error: {exc}")
        return result(False, f"evaluation error: {exc}")
    if expect.get("error"):
        return result(False, "expected an evaluation error, got none")
    if expect.get("skip"):
        return result(not matched, "does not match" if not matched else "matched")
    if not matched:
        return result(False, "the policy does not match this input")
    want_key = {LIMIT: "limit", PLACEMENT: "clusters", PRIORITY: "priority_class"}.get(spec.kind)
    if want_key not in expect:
        return result(False, f"expect needs {want_key!r} for a {spec.kind} policy")
    want = expect[want_key]
    if spec.kind == PLACEMENT:
        clusters = [c["name"] for c in variables.get("fleet", {}).get("clusters", [])]
        value = value or []
        if clusters:
            regions = {c["name"]: c.get("region") for c in variables["fleet"]["clusters"]}
            value = sorted(c for c in clusters if c in value or regions[c] in value)
        ok = sorted(value) == sorted(want)
    else:
        ok = value == want
    detail = f"{want_key} {value!r}"
    if "message" in case or "message_contains" in case:
        message = run_message(enforced, ctx, "")
        if "message" in case and message != case["message"]:
            return result(False, f"expected message {case['message']!r}, got {message!r}")
        if "message_contains" in case and str(case["message_contains"]) not in message:
            return result(False, f"expected message containing {case['message_contains']!r}, "
                          f"got {message!r}")
    return result(ok, detail if ok else f"expected {want_key} {want!r}, got {value!r}")


def run_tests(files: Iterable[PolicyFile], base: Mapping[str, Any]) -> list[CaseResult]:
    """Check every policy and run every case; an invalid policy counts as one failure."""
    results = []
    for policy_file in files:
        for definition in policy_file.policies:
            name = str(definition.get("name"))
            errors = check_fields(normalise(definition))
            if errors:
                detail = "; ".join(f"{k}: {m}" for k, ms in errors.items() for m in ms)
                results.append(CaseResult(name, "(definition)", False, detail))
                continue
            spec = to_spec(definition)
            for case in policy_file.tests.get(name, []):
                results.append(run_case(spec, case, base))
    return results
