"""One policy as the evaluator sees it (`PolicySpec`), what it finds (`Finding`), and running
its `match`, `rule` and `message` on a CEL context, with the rule's type checked for its kind.

Pure Python, no database: `evaluation` runs these over requests, queues and pending workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .celexpr import PolicyEvaluationError, evaluate

VALIDATE, LIMIT, PLACEMENT, PRIORITY = "validate", "limit", "placement", "priority"
ENFORCE, AUDIT, OFF = "enforce", "audit", "off"
KINDS = (VALIDATE, LIMIT, PLACEMENT, PRIORITY)
MODES = (ENFORCE, AUDIT, OFF)
# A policy's `order` (lower runs first): the API, the form, files and the column keep to it.
ORDER_MIN, ORDER_MAX = -1_000_000, 1_000_000

POLICY_DENIED = "POLICY_DENIED"
POLICY_ERROR = "POLICY_ERROR"


@dataclass(frozen=True)
class PolicySpec:
    """A policy as the evaluator sees it (built from a model row or a YAML file)."""

    name: str
    kind: str
    rule: str
    match: str = "true"
    message: str = ""
    key: str = ""
    mode: str = AUDIT
    scope: tuple[str, ...] = ()
    order: int = 100
    version: int = 1
    id: int | None = None
    description: str = ""

    def applies_to_path(self, path: str) -> bool:
        """Whether a queue path lies in the scope (empty scope = everywhere)."""
        if not self.scope:
            return True
        return any(path == s or path.startswith(s + "/") for s in self.scope)


@dataclass(frozen=True)
class Finding:
    """One thing a policy did or would have done, to be recorded and/or acted on.

    outcome: denied | audited | grandfathered | error | capped | placed | prioritized.
    """

    policy: PolicySpec
    outcome: str
    code: str
    message: str
    expression: str = ""
    value: Any = None

def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "double", str: "string", list: "list",
            dict: "map", type(None): "null"}.get(type(value), type(value).__name__)


def run_match(policy: PolicySpec, ctx: Any) -> bool:
    """Evaluate `match`; a non-bool result is an evaluation error."""
    if not policy.match or policy.match.strip() == "true":  # the default: nothing to run
        return True
    value = evaluate(policy.match, ctx)
    if not isinstance(value, bool):
        raise PolicyEvaluationError(f"match returned {_type_name(value)}, expected bool")
    return value


def run_rule(policy: PolicySpec, ctx: Any) -> Any:
    """Evaluate `rule` and check its type for the policy's kind."""
    value = evaluate(policy.rule, ctx)
    if policy.kind == VALIDATE:
        if not isinstance(value, bool):
            raise PolicyEvaluationError(f"rule returned {_type_name(value)}, expected bool")
        return value
    if policy.kind == LIMIT:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PolicyEvaluationError(f"rule returned {_type_name(value)}, expected a number")
        if value < 0:
            raise PolicyEvaluationError(f"rule returned {value}, a limit cannot be negative")
        return value
    if policy.kind == PLACEMENT:
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PolicyEvaluationError(
                f"rule returned {_type_name(value)}, expected a list of cluster or region names"
            )
        return value
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise PolicyEvaluationError(f"rule returned {_type_name(value)}, expected a string")
    return value


def run_message(policy: PolicySpec, ctx: Any, fallback: str) -> str:
    """The policy's message; a broken message never hides the decision, it falls back."""
    if not policy.message.strip():
        return fallback
    try:
        value = evaluate(policy.message, ctx)
    except PolicyEvaluationError as exc:
        return f"{fallback} (message failed: {exc})"
    return value if isinstance(value, str) else str(value)


def error_finding(policy: PolicySpec, where: str, exc: Exception) -> Finding:
    expression = policy.match if where == "match" else policy.rule
    return Finding(
        policy, "error", POLICY_ERROR,
        f"policy {policy.name} could not be evaluated ({where}: {expression}): {exc}",
        expression=expression,
    )
