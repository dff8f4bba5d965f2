"""Limits on CEL expressions, checked before the CEL library sees them, and running an
evaluation in a child process with a time budget.

Pure Python (no Django, no CEL). The CEL library parses and evaluates recursively in native
code that holds the interpreter lock: a deeply nested expression can crash the process (a
Rust panic, or a stack overflow no Python code can catch) and a costly one blocks every
thread of the process until it ends. So an expression is refused, with where and the numbers,
when it is longer than MAX_CHARS, nests brackets deeper than MAX_DEPTH, or nests
comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) deeper than
MAX_COMPREHENSIONS; `scan` finds these in one pass over the text, skipping string literals
and comments. What a scan cannot bound (a comprehension over a long literal list or over the
result of another) is measured when a policy is saved: `run_with_budget` runs the evaluation
in a forked child and kills it when it takes longer than its budget.
"""

from __future__ import annotations

import os
import re
import select
import signal
from collections.abc import Callable

MAX_CHARS = 4096
MAX_DEPTH = 32
MAX_COMPREHENSIONS = 2
MACROS = ("all", "exists", "exists_one", "map", "filter")

_MACRO_CALL = re.compile(r"\.\s*(?:" + "|".join(MACROS) + r")\s*$")
_OPEN, _CLOSE = "([{", ")]}"
# How far back from a "(" a macro's name can start (".exists_one" and some spaces).
_LOOKBACK = 24
# A child that has not even started within this is a failure of the machine, not the rule.
_START_S = 10.0


def _string_end(src: str, i: int) -> int:
    """The index after the string literal starting at `src[i]` (a quote)."""
    quote = src[i]
    raw = i > 0 and src[i - 1] in "rR"
    if src.startswith(quote * 3, i):
        end = src.find(quote * 3, i + 3)
        while end != -1 and not raw and _escaped(src, end):
            end = src.find(quote * 3, end + 1)
        return len(src) if end == -1 else end + 3
    j = i + 1
    while j < len(src) and src[j] != quote and src[j] != "\n":
        j += 2 if src[j] == "\\" and not raw else 1
    return j + 1


def _escaped(src: str, index: int) -> bool:
    backslashes = 0
    while index - 1 - backslashes >= 0 and src[index - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def scan(src: str) -> tuple[int, str] | None:
    """The first limit `src` exceeds, as (index into src, message), or None."""
    if len(src) > MAX_CHARS:
        return MAX_CHARS, (f"the expression is {len(src)} characters long; "
                           f"the limit is {MAX_CHARS}")
    stack: list[bool] = []  # per open bracket: whether it holds a comprehension's arguments
    comprehensions = 0
    i = 0
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = _string_end(src, i)
            continue
        if src.startswith("//", i):
            end = src.find("\n", i)
            i = len(src) if end == -1 else end + 1
            continue
        if c in _OPEN:
            macro = c == "(" and bool(_MACRO_CALL.search(src, max(0, i - _LOOKBACK), i))
            stack.append(macro)
            comprehensions += macro
            if len(stack) > MAX_DEPTH:
                return i, (f"brackets nested {len(stack)} deep; the limit is {MAX_DEPTH}")
            if comprehensions > MAX_COMPREHENSIONS:
                return i, (f"comprehensions ({', '.join(MACROS)}) nested {comprehensions} "
                           f"deep; the limit is {MAX_COMPREHENSIONS}")
        elif c in _CLOSE and stack:
            comprehensions -= stack.pop()
        i += 1
    return None


def run_with_budget(run: Callable[[], None], budget_s: float) -> str | None:
    """Run `run()` in a forked child; None when it ended within `budget_s` seconds, else why
    not (it took longer and was killed, or the child crashed). Where the platform cannot fork,
    `run()` runs here, unguarded."""
    if not hasattr(os, "fork"):
        run()
        return None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's (connections, files) is touched
        try:
            os.close(read_end)
            os.write(write_end, b"s")
            run()
            os.write(write_end, b"1")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        return _wait(pid, read_end, budget_s)
    finally:
        os.close(read_end)


def _wait(pid: int, read_end: int, budget_s: float) -> str | None:
    got, timed_out = b"", False
    for timeout in (_START_S, budget_s):  # the child says it started, then that it ended
        ready, _, _ = select.select([read_end], [], [], timeout)
        if not ready:
            timed_out = True
            break
        chunk = os.read(read_end, 1)
        if not chunk:  # the child ended without saying so
            break
        got += chunk
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if got == b"s1":
        return None
    if timed_out and got == b"s":
        return f"its evaluation took longer than {budget_s:g} s (stopped)"
    if timed_out:
        return f"the evaluation could not start within {_START_S:g} s"
    return "the CEL library crashed evaluating it"
