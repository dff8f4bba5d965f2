"""An uploaded trace read and checked: a Philly-style CSV, an Alibaba-style CSV or a scenario
file (JSON or YAML). Every problem names its line and field with the numbers; the first
`MAX_PROBLEMS` are collected and raised together as `TraceError` (nothing is kept).

The request checks only what is cheap (`check_upload`: the size and the kind, from the name
and the first line); the background task reads the whole file (`read_upload`), reporting how
far through its lines it is.

- Philly-style CSV (msr-fiddle/philly-traces, the per-job summary): `timestamp` (YYYY-MM-DD
  HH:MM:SS, UTC), `duration` (s), `num_gpus`, and the tenant in `cluster` (the virtual
  cluster) or `queue`; other columns (`gpu_time`, ...) are ignored.
- Alibaba-style CSV (alibaba/clusterdata cluster-trace-gpu-v2023, openb_pod_list): `name`,
  `num_gpu`, `gpu_milli` (thousandths of a card per GPU: below 1000 a shared card),
  `cpu_milli`, `memory_mib`, `creation_time`, `scheduled_time`, `deletion_time` (s from the
  trace's start); the tenant in `queue` if there is one, else `qos`. The run time is deletion
  minus scheduled time (creation time when never scheduled). Pods without a GPU are left out.
- A scenario file (docs/engine.md §10): its own fleet, tree and workloads.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

MAX_PROBLEMS = 20
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus")
ALIBABA_COLUMNS = ("name", "num_gpu", "gpu_milli", "cpu_milli", "memory_mib", "creation_time",
                   "deletion_time")
KINDS = ("philly", "alibaba", "scenario")
REPORT_EVERY = 2000
Report = Callable[[float], None]


class TraceError(Exception):
    """An upload that cannot be replayed: `problems` maps a field to its messages."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in problems.items()))
        self.problems = problems


@dataclass(frozen=True)
class Job:
    """One job of a CSV trace: submitted `submit_s` after the first, for `duration_s`, asking
    `gpus` (a fraction: part of one card), `cpu` cores and `memory_gib` per GPU-pod."""

    submit_s: float
    duration_s: float
    gpus: float
    tenant: str
    cpu: float | None = None
    memory_gib: float | None = None


@dataclass
class Trace:
    """What an upload holds: jobs (CSV) or a scenario document, and notes on what was left
    out."""

    kind: str
    jobs: list[Job]
    scenario: dict[str, Any] | None
    notes: list[str]

    @property
    def size(self) -> int:
        return len(self.scenario["workloads"]) if self.scenario else len(self.jobs)


def sniff(name: str, text: str) -> str:
    """The upload's kind from its name and first line."""
    lower = name.lower()
    if lower.endswith((".json", ".yaml", ".yml")):
        return "scenario"
    head = text.lstrip("\ufeff").split("\n", 1)[0].lower()
    cols = {c.strip() for c in head.split(",")}
    if {"num_gpu", "gpu_milli"} <= cols:
        return "alibaba"
    if {"timestamp", "num_gpus"} <= cols:
        return "philly"
    raise TraceError({"file": [
        f"{name!r}: not a trace this page reads: a .json/.yaml scenario, a Philly-style CSV "
        f"(columns {', '.join(PHILLY_COLUMNS)}, cluster) or an Alibaba-style CSV (columns "
        f"{', '.join(ALIBABA_COLUMNS)})"]})


class _Problems:
    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {}
        self.count = 0

    def add(self, where: str, message: str) -> None:
        self.count += 1
        if self.count <= MAX_PROBLEMS:
            self.items.setdefault(where, []).append(message)

    def raise_any(self) -> None:
        if self.count > MAX_PROBLEMS:
            self.items.setdefault("file", []).append(
                f"{self.count} problems in all; the first {MAX_PROBLEMS} are shown")
        if self.items:
            raise TraceError(self.items)


def _number(p: _Problems, where: str, raw: str | None, *, low: float = 0.0,
            integer: bool = False) -> float | None:
    text = (raw or "").strip()
    try:
        value = float(text)
    except ValueError:
        p.add(where, f"{text!r} is not a number")
        return None
    if not math.isfinite(value) or value < low:
        p.add(where, f"{text} < {low:g}" if math.isfinite(value) else f"{text} is not finite")
        return None
    if integer and not value.is_integer():
        p.add(where, f"{text} is not a whole number")
        return None
    return value


def _rows(text: str, required: tuple[str, ...], kind: str) -> csv.DictReader:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError({"file": [f"a {kind} CSV needs the columns {', '.join(required)}; "
                                   f"missing: {', '.join(missing)}"]})
    return reader


def _reporter(text: str, report: Report | None) -> Callable[[int], None]:
    """Calls `report` with the share of lines read, every `REPORT_EVERY` lines."""
    total = max(1, text.count("\n"))

    def at(line: int) -> None:
        if report is not None and line % REPORT_EVERY == 0:
            report(min(1.0, line / total))

    return at


def read_philly(text: str, *, max_jobs: int, report: Report | None = None) -> Trace:
    """A Philly-style CSV as jobs, in submission order from the first."""
    reader = _rows(text, PHILLY_COLUMNS, "Philly-style")
    at = _reporter(text, report)
    tenant_col = "cluster" if "cluster" in (reader.fieldnames or []) else "queue"
    if tenant_col not in (reader.fieldnames or []):
        raise TraceError({"file": ["a Philly-style CSV needs the tenant in `cluster` or "
                                   "`queue`"]})
    p = _Problems()
    raw: list[tuple[float, float, float, str]] = []
    for row in reader:
        line = reader.line_num
        at(line)
        if len(raw) >= max_jobs:
            raise TraceError({"file": [f"more than {max_jobs} jobs (line {line}); upload at "
                                       f"most {max_jobs}"]})
        stamp = (row.get("timestamp") or "").strip()
        try:
            ts = datetime.strptime(stamp + " +0000", "%Y-%m-%d %H:%M:%S %z").timestamp()
        except ValueError:
            p.add(f"line {line}: timestamp", f"{stamp!r} is not YYYY-MM-DD HH:MM:SS")
            ts = None
        duration = _number(p, f"line {line}: duration", row.get("duration"))
        gpus = _number(p, f"line {line}: num_gpus", row.get("num_gpus"), low=1, integer=True)
        tenant = (row.get(tenant_col) or "").strip()
        if not tenant:
            p.add(f"line {line}: {tenant_col}", "empty: the job's tenant")
        if ts is not None and duration is not None and gpus is not None and tenant:
            raw.append((ts, duration, gpus, tenant))
    p.raise_any()
    if not raw:
        raise TraceError({"file": ["no jobs"]})
    raw.sort()
    t0 = raw[0][0]
    jobs = [Job(ts - t0, max(1.0, d), g, t) for ts, d, g, t in raw]
    return Trace("philly", jobs, None, [])


def read_alibaba(text: str, *, max_jobs: int, report: Report | None = None) -> Trace:
    """An Alibaba-style CSV (openb pod list) as jobs; pods without a GPU are left out."""
    reader = _rows(text, ALIBABA_COLUMNS, "Alibaba-style")
    at = _reporter(text, report)
    tenant_col = "queue" if "queue" in (reader.fieldnames or []) else "qos"
    p = _Problems()
    raw: list[tuple[float, float, float, str, float, float]] = []
    cpu_only = 0
    for row in reader:
        line = reader.line_num
        at(line)
        where = f"line {line}: "
        n = _number(p, where + "num_gpu", row.get("num_gpu"), integer=True)
        milli = _number(p, where + "gpu_milli", row.get("gpu_milli"))
        cpu = _number(p, where + "cpu_milli", row.get("cpu_milli"))
        mem = _number(p, where + "memory_mib", row.get("memory_mib"))
        created = _number(p, where + "creation_time", row.get("creation_time"))
        deleted = _number(p, where + "deletion_time", row.get("deletion_time"))
        sched_raw = (row.get("scheduled_time") or "").strip()
        scheduled = _number(p, where + "scheduled_time", sched_raw) if sched_raw else None
        if milli is not None and milli > 1000:
            p.add(where + "gpu_milli", f"{milli:g} > 1000 (thousandths of one card)")
            milli = None
        if None in (n, milli, cpu, mem, created, deleted):
            continue
        assert n is not None and milli is not None and created is not None
        assert deleted is not None and cpu is not None and mem is not None
        if n == 0 or milli == 0:
            cpu_only += 1
            continue
        start = scheduled if scheduled else created
        if deleted <= start:
            p.add(where + "deletion_time", f"{deleted:g} is not after the start {start:g}")
            continue
        if len(raw) >= max_jobs:
            raise TraceError({"file": [f"more than {max_jobs} GPU pods (line {line}); upload "
                                       f"at most {max_jobs}"]})
        gpus = milli / 1000 if milli < 1000 else n
        tenant = (row.get(tenant_col) or "").strip() or "default"
        raw.append((created, deleted - start, gpus, tenant, cpu / 1000, mem / 1024))
    p.raise_any()
    if not raw:
        raise TraceError({"file": [f"no GPU pods ({cpu_only} without a GPU)"]})
    raw.sort()
    t0 = raw[0][0]
    jobs = [Job(c - t0, max(1.0, d), g, t, cpu, mem) for c, d, g, t, cpu, mem in raw]
    notes = [f"{cpu_only} pods without a GPU left out"] if cpu_only else []
    return Trace("alibaba", jobs, None, notes)


def read_scenario_text(name: str, text: str, *, max_jobs: int) -> Trace:
    """A scenario file (JSON or YAML); its fields are checked when it is loaded."""
    try:
        if name.lower().endswith(".json"):
            doc = json.loads(text)
        else:
            doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError({"file": [f"{name!r}: not valid "
                                   f"{'JSON' if name.lower().endswith('.json') else 'YAML'}: "
                                   f"{first}"]}) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("workloads"), list):
        raise TraceError({"file": [f"{name!r}: a scenario is an object with `workloads` (a "
                                   "list), `queues`, `clusters`, `flavors` and `until`"]})
    if len(doc["workloads"]) > max_jobs:
        raise TraceError({"file": [f"{len(doc['workloads'])} workloads > {max_jobs}; upload "
                                   f"at most {max_jobs}"]})
    if not doc["workloads"]:
        raise TraceError({"file": ["no workloads"]})
    return Trace("scenario", [], doc, [])


def check_size(size: int, *, max_bytes: int) -> None:
    """TraceError if an upload of `size` bytes is over the limit."""
    if size > max_bytes:
        raise TraceError({"file": [f"{size:,} bytes > the limit of {max_bytes:,}"]})


def check_upload(name: str, size: int, head: bytes, *, max_bytes: int) -> str:
    """What the request checks of an upload, without reading it whole: its size and its kind
    (from its name and first line); TraceError otherwise."""
    check_size(size, max_bytes=max_bytes)
    if not head.strip():
        raise TraceError({"file": ["the file is empty"]})
    return sniff(name, head.decode("utf-8", errors="replace"))


def read_upload(name: str, data: bytes, *, max_bytes: int, max_jobs: int,
                report: Report | None = None) -> Trace:
    """An uploaded file read and checked (module docstring); TraceError on any problem.
    `report` gets the share of lines read (CSV)."""
    check_upload(name, len(data), data[:4096], max_bytes=max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError({"file": [f"not UTF-8 text (byte {exc.start})"]}) from exc
    kind = sniff(name, text)
    if kind == "scenario":
        return read_scenario_text(name, text, max_jobs=max_jobs)
    if kind == "alibaba":
        return read_alibaba(text, max_jobs=max_jobs, report=report)
    return read_philly(text, max_jobs=max_jobs, report=report)
