"""Small builders for scenario runner tests: a base scenario, workloads."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {
    "name": "unit",
    "until": 100,
    "flavors": [{"name": "a100-80g", "gpu_memory_gib": 80}],
    "clusters": [{"name": "c", "nodes": [{"count": 2, "flavor": "a100-80g", "gpus": 8,
                                          "cpu": 96, "memory_gib": 1024}]}],
    "queues": [{"name": "a", "quota": {"a100-80g": {"gpu": {"min": 8, "max": 16}}}},
               {"name": "b", "quota": {"a100-80g": {"gpu": {"min": 8, "max": 16}}}}],
    "workloads": [],
}


def scenario(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc.update(changes)
    return doc


def job(name: str, queue: str, at: float, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return {"name": name, "queue": queue, "submit_at": at,
            "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": gpus}], **kw}
