"""What `allot submit` sends: a manifest file (YAML or JSON, the fields of
`POST /api/v1/workloads`) or flags for the common fields, the flags overriding the file's.

The server validates the submission (every bad field named, nothing saved); here only what
the server cannot see is checked: the file can be read, it is a mapping, and no field is
misspelt (the API ignores fields it does not know, so a typo would silently do nothing).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from allot_cli.errors import CliError, Exit

# The fields of a submission and of one of its pod sets (WorkloadInputSerializer in the API
# schema; tests/unit/cli/test_manifest.py pins these equal to it).
WORKLOAD_FIELDS = ("name", "queue", "priority_class", "preemptible", "checkpoint", "strategy",
                   "image", "command", "dataset", "duration_hint_s", "termination_grace_s",
                   "topology", "labels", "pods", "manifest", "flavors", "interactive",
                   "idle_timeout_s", "time_limit_s")
POD_SET_FIELDS = ("count", "flavors", "gpus", "cpu", "memory_gib", "gpu_memory_gib",
                  "resources")
# Flags that set a top-level field (with a manifest they override its value).
FIELD_FLAGS = {"name": "name", "queue": "queue", "priority": "priority_class",
               "image": "image", "command": "command", "duration": "duration_hint_s",
               "labels": "labels"}
POD_FLAGS = ("gpus", "pods", "flavor", "cpu", "memory")
DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?")


def parse_duration(text: str) -> int:
    """Seconds in `3600`, `90s`, `45m`, `2h`, `1h30m`, `2d`; a ValueError naming the text."""
    found = DURATION.fullmatch(text.strip().lower())
    if not text.strip() or found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a duration (e.g. 3600, 90s, 45m, 2h, 1h30m, 2d)")
    d, h, m, s = (int(g or 0) for g in found.groups())
    seconds = ((d * 24 + h) * 60 + m) * 60 + s
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be longer than 0 seconds")
    return seconds


def parse_label(text: str) -> tuple[str, str]:
    """`key=value` as a pair; a ValueError naming the text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{text!r} is not KEY=VALUE")
    return key, value


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest at `path` (`-`: standard input) as a mapping; YAML, or JSON for `.json`."""
    name = "standard input" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(Exit.USAGE, f"cannot read the manifest {name}: "
                                   f"{getattr(exc, 'strerror', None) or exc}") from exc
    try:
        if path.endswith(".json"):
            doc = json.loads(text)
        else:
            doc = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise CliError(Exit.REFUSED, f"{name}: line {exc.lineno}, column {exc.colno}: "
                                     f"{exc.msg}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CliError(Exit.REFUSED, f"{name}: {where}{problem}") from exc
    if not isinstance(doc, dict):
        raise CliError(Exit.REFUSED, f"{name}: a manifest is a mapping of the workload's fields "
                                     f"({', '.join(WORKLOAD_FIELDS[:3])}, pods, ...), not "
                                     f"{type(doc).__name__ if doc is not None else 'empty'}")
    check_fields(doc, name)
    return _plain(doc)


def _plain(value: Any) -> Any:
    # YAML reads `2026-05-01` as a date: the API wants text.
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def check_fields(doc: dict[str, Any], name: str) -> None:
    """Refuse fields the API does not know (exit 1), naming each and where it is."""
    unknown = [f"{k!r}" for k in doc if k not in WORKLOAD_FIELDS]
    pods = doc.get("pods")
    if isinstance(pods, list):
        for i, pod_set in enumerate(pods):
            if isinstance(pod_set, dict):
                unknown += [f"'pods[{i}].{k}'" for k in pod_set if k not in POD_SET_FIELDS]
    if unknown:
        raise CliError(Exit.REFUSED, f"{name}: unknown field{'s' if len(unknown) > 1 else ''} "
                       f"{', '.join(unknown)} (a workload has {', '.join(WORKLOAD_FIELDS)}; "
                       f"a pod set has {', '.join(POD_SET_FIELDS)})")


def default_name(now: datetime | None = None) -> str:
    """A DNS-safe name for a submission given none: `job-YYYYMMDD-HHMMSS` (UTC)."""
    return f"job-{(now or datetime.now(UTC)):%Y%m%d-%H%M%S}"


def submission(manifest: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The body of `POST /api/v1/workloads` from a manifest and/or flags (None: not given).

    Without a manifest, --queue, --flavor and --gpus are required (a usage error names the
    missing ones); with one, the flags of a pod set are refused: write it in `pods`.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    if manifest is not None:
        pod_flags = [f"--{k}" for k in POD_FLAGS if k in given]
        if pod_flags:
            raise CliError(Exit.USAGE, f"{', '.join(pod_flags)} describe a pod set: with a "
                                       "manifest, write it under `pods` in the file")
        data = read_manifest(manifest)
    else:
        missing = [f"--{k}" for k in ("queue", "flavor", "gpus") if k not in given]
        if missing:
            raise CliError(Exit.USAGE, "give a manifest FILE, or the flags --queue, --flavor "
                                       f"and --gpus at least (missing: {', '.join(missing)})")
        pod_set: dict[str, Any] = {"count": given.get("pods", 1), "gpus": given["gpus"],
                                   "flavors": [f for item in given["flavor"]
                                               for f in item.split(",") if f]}
        if "cpu" in given:
            pod_set["cpu"] = given["cpu"]
        if "memory" in given:
            pod_set["memory_gib"] = given["memory"]
        data = {"pods": [pod_set]}
    for flag, field in FIELD_FLAGS.items():
        if flag not in given:
            continue
        value = given[flag]
        if flag == "command":
            value = shlex.split(value)
        elif flag == "labels":
            value = {**(data.get("labels") or {}), **dict(value)}
        data[field] = value
    data.setdefault("name", default_name())
    return data
