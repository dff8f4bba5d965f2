"""Patches as the API server applies them: JSON merge, strategic merge and JSON patch."""

from __future__ import annotations

import copy
from typing import Any

from tests.k8s_double.errors import ApiError


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch, the part built-in types use: lists of named objects (containers,
    env, volumes) merge by `name`; `$patch: replace|delete` on maps; other lists replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and _named_list(value) and _named_list(result.get(key)):
            merged = {item["name"]: copy.deepcopy(item) for item in result.get(key) or []}
            order = [item["name"] for item in result.get(key) or []]
            for item in value:
                if item.get("$patch") == "delete":
                    merged.pop(item["name"], None)
                    continue
                if item["name"] not in merged:
                    order.append(item["name"])
                merged[item["name"]] = strategic_merge_patch(merged.get(item["name"]), item)
            result[key] = [merged[name] for name in order if name in merged]
        else:
            merged_value = strategic_merge_patch(result.get(key), value)
            if merged_value is None:
                result.pop(key, None)
            else:
                result[key] = merged_value
    return result


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(target: dict, operations: list) -> dict:
    """RFC 6902 JSON patch (add, replace, remove, test) on maps and lists."""
    doc = copy.deepcopy(target)
    for op in operations:
        parts = _pointer(op["path"])
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        kind = op["op"]
        if kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op["value"]))
                else:
                    parent[index] = copy.deepcopy(op["value"])
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, f"the server rejected our request: path {op['path']} "
                                   "does not exist")
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last, None)
        elif kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, f"the server rejected our request: test failed at {op['path']}")
        else:
            raise ApiError(400, f"unsupported JSON patch operation {kind!r}")
    return doc


def apply_patch(obj: dict, patch: Any, content_type: str) -> dict:
    base = content_type.split(";")[0].strip()
    if base == "application/merge-patch+json":
        return merge_patch(obj, patch)
    if base == "application/strategic-merge-patch+json":
        return strategic_merge_patch(obj, patch)
    if base == "application/json-patch+json":
        if not isinstance(patch, list):
            raise ApiError(400, "json patch must be a list of operations")
        return json_patch(obj, patch)
    raise ApiError(415, f'the body of the request was in an unknown format - accepted media '
                   f'types include: application/json-patch+json, application/merge-patch+json, '
                   f'application/strategic-merge-patch+json (got "{content_type}")')
