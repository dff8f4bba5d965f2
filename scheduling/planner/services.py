"""Start a trace replay (the proposal and the upload's size and kind checked, the upload
stored, queued; nothing is saved on a problem) and run it in the background (the task
`scheduling.trace_replay`): the upload read and the three scenarios built (a refused upload
ends the replay failed, its problems by line on its page and in the API), then replayed, the
progress stored as it goes."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from portal.pages.access import plan_scope
from scheduling import enqueue
from scheduling.models import TraceReplay, WhatIfState
from scheduling.planner.results import last_event, replay, side_summary
from scheduling.planner.traces import TraceError, check_size, check_upload, read_upload
from scheduling.planner.variants import (
    TAIL_S,
    VARIANTS,
    check_on_frame,
    trace_scenario,
    variants,
)
from scheduling.whatif.build import live_frame, live_scenario
from scheduling.whatif.compare import Progress
from scheduling.whatif.services import what_if_allowed

logger = logging.getLogger(__name__)
MAX_HISTORY_DAYS = 90
# The share of the progress bar for reading the upload (the rest: the three replays).
READ_SHARE = 0.1


def planner_allowed(*, user: Any, changes: dict[str, Any], tree: Any) -> None:
    """Admins may replay anything; a lead may propose quota changes of the queues they decide
    for (a whole tree is for admins); others nothing (PermissionDenied, naming why)."""
    scope = plan_scope(user)
    if not scope.allowed:
        raise PermissionDenied("the capacity planner is for admins and team leads")
    if tree is not None and not scope.is_admin:
        raise PermissionDenied("only admins may propose a whole tree")
    what_if_allowed(user=user, changes={"quotas": changes.get("quotas") or []})


def read_tree(name: str, data: bytes) -> list[dict[str, Any]]:
    """An uploaded proposed tree: a scenario's `queues` list, or a file with `queues` in it."""
    try:
        text = data.decode("utf-8")
        doc = json.loads(text) if name.lower().endswith(".json") else yaml.load(
            text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except (ValueError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError({"tree": [f"{name!r}: not valid JSON or YAML: {first}"]}) from exc
    if isinstance(doc, dict):
        doc = doc.get("queues")
    if not isinstance(doc, list) or not doc or not all(
            isinstance(q, dict) and q.get("name") for q in doc):
        raise TraceError({"tree": [f"{name!r}: a tree is a list of queues (each with a name, "
                                   "its quota and children), or an object with `queues`"]})
    return doc


def _changes(raw: Any) -> dict[str, Any]:
    if raw in (None, ""):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise TraceError({"changes": [f"not JSON: {exc}"]}) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("quotas", []), list):
        raise TraceError({"changes": ["expected an object with `quotas`: a list of {queue, "
                                      "flavor, resource, min, max, lendable}"]})
    unknown = sorted(set(raw) - {"quotas"})
    if unknown:
        raise TraceError({"changes": [f"unknown keys {', '.join(unknown)} (only quotas)"]})
    return {"quotas": raw.get("quotas") or []}


def trace_replay_start(*, user: Any, name: str, size: int, read: Callable[[], bytes],
                       flavor: str | None = None, changes: Any = None, tree_name: str = "",
                       tree_data: bytes | None = None) -> TraceReplay:
    """Check what is cheap (the proposal, who may make it, the upload's size and kind from its
    first line; for a CSV the flavor and the changes on the live tree), store the upload and
    queue the replay; the task reads the file (TraceError naming each problem here, nothing
    saved). `read` gives the file's bytes, called only once its size is within the limit."""
    changes = _changes(changes)
    if tree_data is not None and len(tree_data) > settings.ALLOT_PLANNER_MAX_UPLOAD_BYTES:
        raise TraceError({"tree": [f"{len(tree_data):,} bytes > the limit of "
                                   f"{settings.ALLOT_PLANNER_MAX_UPLOAD_BYTES:,}"]})
    tree = read_tree(tree_name or "tree.json", tree_data) if tree_data else None
    planner_allowed(user=user, changes=changes, tree=tree)
    limit = settings.ALLOT_PLANNER_MAX_UPLOAD_BYTES
    check_size(size, max_bytes=limit)
    data = read()
    kind = check_upload(name, len(data), data[:4096], max_bytes=limit)
    if kind != "scenario" and tree is None:
        check_on_frame(live_frame(), flavor=flavor or None, changes=changes)
    with transaction.atomic():
        run = TraceReplay.objects.create(
            owner=user, created_at=timezone.now(), name=name[:200], kind=kind, upload=data,
            flavor=flavor or "", changes=changes, tree=tree)
        transaction.on_commit(lambda: enqueue.trace_replay_queue(run.pk))
    return run


def _store(*, user: Any, name: str, kind: str, changes: dict[str, Any],
           docs: dict[str, dict[str, Any]]) -> TraceReplay:
    with transaction.atomic():
        run = TraceReplay.objects.create(
            owner=user, created_at=timezone.now(), name=name[:200], kind=kind,
            workloads=len(docs["current"]["workloads"]), changes=changes, scenarios=docs)
        transaction.on_commit(lambda: enqueue.trace_replay_queue(run.pk))
    return run


def trace_replay_read(*, run: TraceReplay, report: Progress) -> dict[str, Any]:
    """The stored upload read and its three scenarios built (the fleet and tree as they are
    now): the fields to store (TraceError naming each line and problem)."""
    trace = read_upload(run.name, bytes(run.upload or b""),
                        max_bytes=settings.ALLOT_PLANNER_MAX_UPLOAD_BYTES,
                        max_jobs=settings.ALLOT_PLANNER_MAX_JOBS, report=report)
    current = trace_scenario(trace, live_frame() if trace.scenario is None else {},
                             flavor=run.flavor or None, name=run.name)
    docs = variants(current, changes=run.changes, tree=run.tree)
    return {"kind": trace.kind, "notes": trace.notes, "scenarios": docs,
            "workloads": len(docs["current"]["workloads"])}


def trace_replay_history(*, user: Any, days: float, changes: Any) -> TraceReplay:
    """The last `days` of submissions (each for the time it ran) replayed on the live fleet
    under static quotas, the current tree and the proposed changes (a recommendation's
    evidence)."""
    changes = _changes(changes)
    if not (0 < days <= MAX_HISTORY_DAYS):
        raise TraceError({"days": [f"{days!r}: a number above 0, at most {MAX_HISTORY_DAYS}"]})
    planner_allowed(user=user, changes=changes, tree=None)
    now = timezone.now()
    doc = live_scenario(now=now, hours=days * 24, repeat_past=True)
    doc["workloads"] = [w for w in doc["workloads"] if w["name"].startswith("r")]
    if not doc["workloads"]:
        raise TraceError({"days": [f"no submissions in the last {days:g} days"]})
    if len(doc["workloads"]) > settings.ALLOT_PLANNER_MAX_JOBS:
        doc["workloads"] = doc["workloads"][-settings.ALLOT_PLANNER_MAX_JOBS:]
    doc["until"] = int(days * 86_400 + TAIL_S)
    doc["name"] = f"history {now - timedelta(days=days):%Y-%m-%d} to {now:%Y-%m-%d %H:%M} UTC"
    docs = variants(doc, changes=changes, tree=None)
    return _store(user=user, name=doc["name"], kind="history", changes=changes, docs=docs)


def trace_replay_run(*, replay_id: int) -> None:
    """Read the upload (if not yet), replay the three scenarios and store the comparison;
    idempotent (a finished one is left). A refused upload ends the run failed with its
    problems, and nothing of it stored but them."""
    run = TraceReplay.objects.filter(pk=replay_id).first()
    if run is None or run.state in (WhatIfState.DONE, WhatIfState.FAILED):
        return
    TraceReplay.objects.filter(pk=run.pk).update(state=WhatIfState.RUNNING, progress=0.0)
    started = time.monotonic()
    share = 0.0
    if run.upload is not None:
        share = READ_SHARE
        try:
            def reading(frac: float) -> None:
                TraceReplay.objects.filter(pk=run.pk).update(progress=round(frac * READ_SHARE, 3))

            fields = trace_replay_read(run=run, report=reading)
        except TraceError as exc:
            TraceReplay.objects.filter(pk=run.pk).update(
                state=WhatIfState.FAILED, problems=exc.problems, error=str(exc)[:2000],
                upload=None, seconds=round(time.monotonic() - started, 2))
            return
        except Exception as exc:
            logger.exception("trace replay %s: reading the upload failed", run.pk)
            TraceReplay.objects.filter(pk=run.pk).update(
                state=WhatIfState.FAILED, error=str(exc)[:2000], upload=None,
                seconds=round(time.monotonic() - started, 2))
            return
        TraceReplay.objects.filter(pk=run.pk).update(upload=None, progress=READ_SHARE,
                                                     **fields)
        run.refresh_from_db()
    try:
        outs = {}
        for i, label in enumerate(VARIANTS):
            def progress(frac: float, i: int = i) -> None:
                TraceReplay.objects.filter(pk=run.pk).update(progress=round(
                    share + (1 - share) * (i + frac) / len(VARIANTS), 3))

            outs[label] = replay(run.scenarios[label], progress)
            progress(1.0)
        end = max(last_event(sc, out) for sc, out in outs.values())
        result = {label: side_summary(sc, out, end) for label, (sc, out) in outs.items()}
    except Exception as exc:
        logger.exception("trace replay %s failed", run.pk)
        TraceReplay.objects.filter(pk=run.pk).update(
            state=WhatIfState.FAILED, error=str(exc)[:2000],
            seconds=round(time.monotonic() - started, 2))
        return
    TraceReplay.objects.filter(pk=run.pk).update(
        state=WhatIfState.DONE, progress=1.0, result=result,
        seconds=round(time.monotonic() - started, 2))
