"""The quota tree and the fleet: `queues` (/api/v1/queues) and `top`, a live view of the
clusters, the queues and the workloads (/api/v1/clusters, /queues, /workloads)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from allot_cli.context import Context
from allot_cli.errors import Exit
from allot_cli.output import emit, number, table

LIVE_STATES = ("pending", "reserved", "running", "preempting")


def _walk(nodes: list[dict[str, Any]], depth: int = 0
          ) -> Iterator[tuple[int, dict[str, Any]]]:
    for node in nodes:
        yield depth, node
        yield from _walk(node.get("children", []), depth + 1)


def queue_rows(tree: list[dict[str, Any]], resource: str) -> list[list[Any]]:
    """One row per queue and flavor it sets or uses (`resource`: gpu, cpu or memory),
    indented by depth; a queue with none gets one row of dashes."""
    rows: list[list[Any]] = []
    for depth, node in _walk(tree):
        label = "  " * depth + node["name"] + ("" if node["is_leaf"] else "/")
        shown = False
        for flavor, cells in sorted(node.get("quota", {}).items()):
            cell = cells.get(resource)
            if not cell or not (cell["set"] or cell["used"] or cell["pending"]):
                continue
            rows.append([label if not shown else "", flavor, number(cell["used"]),
                         number(cell["min"]),
                         "unlimited" if cell["max"] is None else number(cell["max"]),
                         number(cell["borrowed"]), number(cell["lent"]),
                         number(cell["pending"])])
            shown = True
        if not shown:
            rows.append([label, "-", "", "", "", "", "", ""])
    return rows


QUEUE_HEADERS = ["QUEUE", "FLAVOR", "USED", "MIN", "MAX", "BORROWED", "LENT", "PENDING"]


def run_queues(ctx: Context) -> int:
    """GET /api/v1/queues (or one queue's subtree): the tree with quota and usage."""
    a = ctx.args
    api = ctx.api()
    tree = [api.get(f"queues/{a.path.strip('/')}")] if a.path else api.get("queues")
    emit(tree, ctx.output, lambda: table(QUEUE_HEADERS, queue_rows(tree, a.resource),
                                         right=range(2, 8)) if tree else "No queues.")
    return Exit.OK


def fleet_rows(clusters: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per cluster and flavor: GPUs used of ready and installed, nodes ready."""
    rows = []
    for c in clusters:
        first = True
        for flavor, f in sorted(c.get("flavors", {}).items()):
            head = [c["name"] + ("" if c["enabled"] else " (off)"), c["region"],
                    f"{c['health']:.2f}"] if first else ["", "", ""]
            gpus = [f["used"]["gpu"], f["allocatable"]["gpu"], f["capacity"]["gpu"]] \
                if f["capacity"]["gpu"] else ["-", "-", "-"]  # a CPU-only flavor
            rows.append([*head, flavor, *gpus, f"{f['ready_nodes']}/{f['nodes']}"])
            first = False
        if not c.get("flavors"):
            rows.append([c["name"], c["region"], f"{c['health']:.2f}", "-", "", "", "", "0/0"])
    return rows


def snapshot(ctx: Context) -> dict[str, Any]:
    """What one frame of `top` shows, read from the API."""
    api = ctx.api()
    counts = {s: int(api.get("workloads", {"state": s}).get("count", 0)) for s in LIVE_STATES}
    return {"at": datetime.now(UTC).isoformat(), "server": api.server,
            "clusters": api.get("clusters"), "queues": api.get("queues"),
            "workloads": counts}


def frame(data: dict[str, Any], *, interval: float | None, height: int | None) -> str:
    """One screen of `top`; `height` clips it to the terminal (None: everything)."""
    at = datetime.fromisoformat(data["at"])
    head = f"allot top  {data['server']}  {at:%Y-%m-%d %H:%M:%S} UTC"
    if interval:
        head += f"  (every {interval:g} s; Ctrl-C quits)"
    counts = "  ".join(f"{s} {n}" for s, n in data["workloads"].items())
    clusters = data["clusters"]
    gpus = [f for c in clusters if c["enabled"] for f in c.get("flavors", {}).values()]
    used, ready = sum(f["used"]["gpu"] for f in gpus), sum(f["allocatable"]["gpu"] for f in gpus)
    busy = f"{100 * used / ready:.0f}%" if ready else "-"
    lines = [head, f"Workloads: {counts}", f"GPUs: {used} used of {ready} ready ({busy})", "",
             "FLEET",
             table(["CLUSTER", "REGION", "HEALTH", "FLAVOR", "USED", "READY", "TOTAL",
                    "NODES"], fleet_rows(clusters), right=(2, 4, 5, 6, 7)),
             "", "QUEUES (GPUs)",
             table(QUEUE_HEADERS, queue_rows(data["queues"], "gpu"), right=range(2, 8))]
    text = "\n".join(lines).splitlines()
    if height is not None and len(text) > height:
        text = text[:height - 1] + [f"... {len(text) - height + 1} more lines "
                                    "(a taller terminal, or allot top --once)"]
    return "\n".join(text)


def run_top(ctx: Context) -> int:
    """Print a frame every `--interval` seconds (clearing the screen), or one with --once."""
    a = ctx.args
    if a.once or ctx.output != "table":
        data = snapshot(ctx)
        emit(data, ctx.output, lambda: frame(data, interval=None, height=None))
        return Exit.OK
    try:
        while True:
            data = snapshot(ctx)
            height = shutil.get_terminal_size((120, 40)).lines
            sys.stdout.write("\x1b[H\x1b[2J" + frame(data, interval=a.interval, height=height))
            sys.stdout.flush()
            time.sleep(a.interval)
    except KeyboardInterrupt:
        sys.stdout.write("\n")
    return Exit.OK
