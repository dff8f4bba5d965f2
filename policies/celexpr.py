"""CEL through the `common-expression-language` package: checking, compiling, evaluating.

Pure Python (no Django). Programs are compiled once per expression text and cached; one
`cel.Context` is built per evaluation context and shared by every policy evaluated on it,
which keeps 100 policies on one submission well under a millisecond.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

import cel

from .cel_limits import run_with_budget, scan

logger = logging.getLogger(__name__)
# The variables a rule may read (docs/policies.md describes each).
ROOTS = ("request", "queue", "team", "cost_center", "fleet", "now")

_ERROR_AT = re.compile(r"<input>:(\d+):(\d+):\s*(.*)")
_COMPREHENSION = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,"
)
_IDENT = r"(?<![A-Za-z0-9_.'\"]){}(?![A-Za-z0-9_])"


class PolicyEvaluationError(Exception):
    """A rule failed while running (missing key, wrong type, division by zero...)."""


def _is_panic(exc: BaseException) -> bool:
    """A Rust panic inside the CEL library: pyo3 raises it as a BaseException (so that
    `except Exception` lets it through), named PanicException."""
    return type(exc).__name__ == "PanicException"


@dataclass(frozen=True)
class ExpressionError:
    """Why an expression is refused, and where (1-based line and column)."""

    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"


def _position(src: str, index: int) -> tuple[int, int]:
    line = src.count("\n", 0, index) + 1
    column = index - (src.rfind("\n", 0, index) + 1) + 1
    return line, column


def check_expression(src: str, *, roots: tuple[str, ...] = ROOTS) -> list[ExpressionError]:
    """Parse `src`; return its errors with their positions (empty when it compiles).

    Beyond syntax, a top-level name that is neither one of `roots` nor a comprehension
    variable (`xs.all(x, ...)`) is refused: a misspelt `reqest.gpus` would otherwise only
    fail at run time, on someone's submission.
    """
    if not src or not src.strip():
        return [ExpressionError(1, 1, "empty expression")]
    too_much = scan(src)
    if too_much is not None:
        return [ExpressionError(*_position(src, too_much[0]), too_much[1])]
    try:
        program = cel.compile(src)
    except BaseException as exc:
        if _is_panic(exc):
            return [ExpressionError(1, 1, f"the CEL parser failed on it ({exc})")]
        if not isinstance(exc, Exception):
            raise
        errors = []
        for text in str(exc).splitlines():
            found = _ERROR_AT.search(text)
            if found:
                errors.append(
                    ExpressionError(int(found.group(1)), int(found.group(2)), found.group(3))
                )
        return errors or [ExpressionError(1, 1, str(exc))]
    bound = set(_COMPREHENSION.findall(src))
    errors = []
    for name in program.variables():
        if name in roots or name in bound:
            continue
        found = re.search(_IDENT.format(re.escape(name)), src)
        line, column = _position(src, found.start()) if found else (1, 1)
        errors.append(ExpressionError(
            line, column, f"unknown variable {name!r} (one of: {', '.join(roots)})"
        ))
    return errors


@lru_cache(maxsize=4096)
def compile_expression(src: str) -> Any:
    """The compiled program for `src` (cached by text); an expression over the limits (one
    stored before them) is refused without being parsed. Raises PolicyEvaluationError."""
    too_much = scan(src)
    if too_much is not None:
        raise PolicyEvaluationError(f"refused: {too_much[1]}")
    try:
        return cel.compile(src)
    except BaseException as exc:
        raise _evaluation_error(exc, src) from exc


@lru_cache(maxsize=4096)
def referenced_roots(src: str) -> frozenset[str]:
    """The context variables `src` reads (so a context builder can skip the others); none
    when it does not compile (its evaluation then fails on its own)."""
    if not src or not src.strip():
        return frozenset()
    try:
        program = compile_expression(src)
    except PolicyEvaluationError:
        return frozenset()
    return frozenset(v for v in program.variables() if v in ROOTS)


# CEL string literals (triple-quoted, quoted with escapes; raw/bytes prefixes): blanked out
# before looking for variable names, so a "request" inside a message is not a use.
_STRING = re.compile(
    r"""[rRbB]*("\"\"[\s\S]*?"\"\"|'\'\'[\s\S]*?'\'\'"""
    r"""|"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')""")


@lru_cache(maxsize=4096)
def referenced_fields(src: str, root: str) -> frozenset[str] | None:
    """The fields of variable `root` that `src` reads (`request.gpus` -> {"gpus"}), or None
    when it uses the variable otherwise (whole, indexed, passed to a function): then all of it
    is needed. Lets an evaluation loop convert only those fields for CEL."""
    code = _STRING.sub('""', src or "")
    fields: set[str] = set()
    for found in re.finditer(_IDENT.format(re.escape(root)), code):
        access = re.match(r"\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)", code[found.end():])
        if access is None:
            return None
        fields.add(access.group(1))
    return frozenset(fields)


def fields_of(sources: Any, root: str) -> frozenset[str] | None:
    """`referenced_fields` over several expressions (None if any needs the whole variable)."""
    out: set[str] = set()
    for src in sources:
        fields = referenced_fields(src, root)
        if fields is None:
            return None
        out |= fields
    return frozenset(out)


def _join(items: Any, sep: Any = ", ") -> str:
    return str(sep).join(_fmt(x) for x in items)


def _fmt(value: Any) -> str:
    """A number as people write it (16, not 16.0; at most 2 decimals); lists joined."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.2f}".rstrip("0").rstrip(".")
    if isinstance(value, list | tuple):
        return ", ".join(_fmt(x) for x in value)
    return str(value)


def _pct(value: Any) -> str:
    return f"{float(value) * 100:.0f}%"


FUNCTIONS: dict[str, Callable[..., Any]] = {"join": _join, "fmt": _fmt, "pct": _pct}


def plain(value: Any) -> Any:
    """Context values CEL accepts: Decimal to float, tuples/sets to lists, keys to str."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value
    return str(value)


def make_context(variables: Mapping[str, Any]) -> Any:
    """One CEL context for many evaluations (variables converted once)."""
    return cel.Context(variables=plain(variables), functions=FUNCTIONS)


def set_variable(context: Any, name: str, value: Any) -> None:
    """Replace one variable of a context (much cheaper than building a new context)."""
    context.add_variable(name, plain(value))


def _evaluation_error(exc: BaseException, src: str) -> PolicyEvaluationError:
    """`exc` raised by the CEL library as a PolicyEvaluationError (KeyboardInterrupt and the
    like are raised again)."""
    if isinstance(exc, PolicyEvaluationError):
        return exc
    if _is_panic(exc):
        logger.error("the CEL library panicked on %.200r: %s", src, exc)
        return PolicyEvaluationError(f"the CEL library failed on it ({exc})")
    if not isinstance(exc, Exception):
        raise exc
    detail = str(exc)
    if isinstance(exc, KeyError):
        detail = f"no such key: {detail}"
    return PolicyEvaluationError(f"{type(exc).__name__}: {detail}")


def evaluate(src: str, context: Any) -> Any:
    """Run `src` on a context from `make_context`; raise PolicyEvaluationError on failure,
    a panic of the CEL library included."""
    try:
        return compile_expression(src).execute(context)
    except BaseException as exc:  # KeyError, TypeError, RuntimeError, ... and panics
        raise _evaluation_error(exc, src) from exc


def trial_evaluate(
    sources: Iterable[str], variables: Mapping[str, Any], budget_s: float
) -> str | None:
    """Evaluate each expression on `variables` in a child process; why not when that takes
    longer than `budget_s` in all or the CEL library crashes (None: it did not). Errors of
    the evaluation itself (a key the sample lacks) are no concern here."""
    sources = [s for s in sources if s and s.strip()]

    def run() -> None:
        context = make_context(variables)
        for src in sources:
            try:
                compile_expression(src).execute(context)
            except Exception:  # noqa: S112 - only the time and crashes matter here
                continue

    return run_with_budget(run, budget_s) if sources else None
