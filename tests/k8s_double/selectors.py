"""Label selectors, equality- and set-based, as the API server reads `?labelSelector=`."""

from __future__ import annotations

import re

_SET_EXPR = re.compile(r"^\s*(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality- and set-based label selectors, as `?labelSelector=` accepts them."""
    if not selector:
        return True
    for term in _split_selector(selector):
        set_match = _SET_EXPR.match(term)
        if set_match:
            values = {v.strip() for v in set_match["values"].split(",") if v.strip()}
            present = labels.get(set_match["key"])
            if set_match["op"] == "in" and present not in values:
                return False
            if set_match["op"] == "notin" and present in values:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True
