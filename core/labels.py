"""Kubernetes label syntax: keys and values of labels and node selectors, checked before they
are stored (a NUL character, which PostgreSQL cannot store, is never valid here).

A key is an optional prefix (a DNS subdomain of at most 253 characters) and `/`, then a name
of at most 63 characters: letters, digits, `-`, `_` and `.`, beginning and ending with a
letter or digit. A value is empty or such a name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_PREFIX = 253
MAX_NAME = 63
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
                     re.ASCII)

KEY_RULE = (f"an optional DNS subdomain prefix of at most {MAX_PREFIX} characters and '/', "
            f"then a name of at most {MAX_NAME} letters, digits, '-', '_' or '.', beginning "
            "and ending with a letter or digit")
VALUE_RULE = (f"empty, or at most {MAX_NAME} letters, digits, '-', '_' or '.', beginning and "
              "ending with a letter or digit")


def _name_ok(name: str) -> bool:
    return len(name) <= MAX_NAME and _NAME.fullmatch(name) is not None


def label_key_problem(key: object) -> str | None:
    """What is wrong with a label key (None: nothing)."""
    if not isinstance(key, str):
        return f"label key {key!r} is not text"
    if "\x00" in key:
        return f"label key {key!r} contains a NUL character"
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= MAX_PREFIX and _PREFIX.fullmatch(prefix)):
        return f"label key {key!r}: prefix {prefix!r} is not a DNS subdomain ({KEY_RULE})"
    if not _name_ok(name):
        return f"label key {key!r} is not a Kubernetes label key ({KEY_RULE})"
    return None


def label_value_problem(key: object, value: object) -> str | None:
    """What is wrong with a label's value (None: nothing)."""
    if not isinstance(value, str):
        return f"label {key!r}: value {value!r} is not text"
    if "\x00" in value:
        return f"label {key!r}: value {value!r} contains a NUL character"
    if value and not _name_ok(value):
        return f"label {key!r}: value {value!r} is not a Kubernetes label value ({VALUE_RULE})"
    return None


def labels_problems(labels: object) -> list[str]:
    """Every problem of a mapping of label keys to values (labels, a node selector)."""
    if not isinstance(labels, Mapping):
        return [f"{labels!r} is not a mapping of label keys to values"]
    problems = []
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(key, value)
        if problem:
            problems.append(problem)
    return problems
