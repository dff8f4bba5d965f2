"""The Celery app: tasks are discovered in every installed app's tasks.py.

With ALLOT_TASK_PROFILE=DIR every worker process profiles the tasks it runs (cProfile) and
counts their SQL queries and query time per task name, and writes both to DIR when it stops
(`prof-<pid>.pstats`, `queries-<pid>.json`): how the full-stack benchmark is profiled.
"""

import os
from pathlib import Path
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_broker_folders_made: set[str] = set()


def broker_folders_make(**_: Any) -> None:
    """Make the filesystem broker's folders (the default broker, settings.BROKER_DIR), which
    kombu expects to exist: before a process publishes its first task, and when a worker or
    the beat starts. Other brokers need nothing."""
    if not str(app.conf.broker_url or "").startswith("filesystem://"):
        return
    options = app.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "data_folder_processed", "control_folder"):
        folder = options.get(key)
        if folder and folder not in _broker_folders_made:
            Path(folder).mkdir(parents=True, exist_ok=True)
            _broker_folders_made.add(folder)


def _gc_tune(**_: Any) -> None:
    """Each worker process, once started: the collector's settings (core/runtime.py)."""
    from core.runtime import gc_tune

    gc_tune()


signals.worker_init.connect(_gc_tune, weak=False)
signals.worker_process_init.connect(_gc_tune, weak=False)
signals.before_task_publish.connect(broker_folders_make, weak=False)
signals.worker_init.connect(broker_folders_make, weak=False)
signals.beat_init.connect(broker_folders_make, weak=False)


def _install_task_profiler(directory: str) -> None:
    """Profile every task of this process; dump when the process shuts down."""
    import cProfile
    import json
    import time
    from collections import defaultdict

    profiler = cProfile.Profile()
    stats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    current: dict[str, Any] = {}

    def count_queries(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            name = current.get("task", "-")
            stats[name]["queries"] += 1
            stats[name]["query_s"] += time.perf_counter() - started

    @signals.task_prerun.connect(weak=False)
    def _start(task: Any = None, **_: Any) -> None:
        from django.db import connection

        current["task"] = task.name if task is not None else "-"
        current["t0"] = time.perf_counter()
        current["c0"] = time.process_time()
        if not current.get("wrapped"):
            connection.execute_wrappers.append(count_queries)
            current["wrapped"] = True
        profiler.enable()

    @signals.task_postrun.connect(weak=False)
    def _stop(task: Any = None, **_: Any) -> None:
        profiler.disable()
        name = current.get("task", "-")
        stats[name]["runs"] += 1
        stats[name]["wall_s"] += time.perf_counter() - current.get("t0", time.perf_counter())
        stats[name]["cpu_s"] += time.process_time() - current.get("c0", time.process_time())
        current["task"] = "-"

    def _dump(**_: Any) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if stats:
            profiler.dump_stats(str(out / f"prof-{os.getpid()}.pstats"))
            (out / f"queries-{os.getpid()}.json").write_text(json.dumps(stats, indent=1))

    signals.worker_process_shutdown.connect(_dump, weak=False)
    signals.worker_shutdown.connect(_dump, weak=False)


if os.environ.get("ALLOT_TASK_PROFILE"):
    _install_task_profiler(os.environ["ALLOT_TASK_PROFILE"])
