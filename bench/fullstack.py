"""Full-stack benchmark: a scenario played in real time against PostgreSQL, Redis, real Celery
workers (cycle, dispatch, sync) and simulated clusters, submitting through `workload_submit`
at the scenario's times.

    python -m bench.fullstack --scenario FILE [--json] [--workers 2] [--scale 1.0]
    python -m bench.fullstack --write-kueue FILE     # Kueue's baseline as a scenario file
    python -m bench.fullstack --kinds mixed [...]    # the same, submitted as manifests

With `--kinds mixed` the workloads go in as manifests of the kinds teams run, in turn by their
order within each queue: Allot's own request, `batch/v1` Job, JobSet, PyTorchJob, RayJob (HTTP
submission mode: no submitter pod, so the requests stay the scenario's), TFJob and Volcano
Job, each with the scenario workload's pods and requests (the serving kinds, LeaderWorkerSet,
Deployment, StatefulSet and RayCluster, are left out: they run until deleted, and the run ends
when every workload has). The simulated clusters run
every kind, so the figure is the cost of the kinds' derivation, gating and status on the whole
path.

With no --scenario it writes Kueue's baseline (5 cohorts x 6 queues, min 20 max 120 CPU,
15,000 workloads; see bench/engine.py) to var/ and plays it. Prints wall time, admissions per
second, average time-to-admit per priority class and average queue usage; `--json` prints one
object `{"wall_s", "admissions_per_s", "time_to_admit_s": {CLASS: avg}, "queue_usage",
"finished"}` on stdout, and the run's details (workers' CPU seconds, load average, states) as
a second object on stderr.

Environment: BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/allot_bench_fullstack,
created and migrated if missing; its scheduling tables are emptied first), BENCH_BROKER_URL
(default redis://127.0.0.1:6379/1, flushed first). Durations below a second are played
exactly: the simulated cluster runs at SPEEDUP x and duration hints are scaled by it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/allot_bench_fullstack"
DEFAULT_BROKER = "redis://127.0.0.1:6379/1"
SPEEDUP = 100  # simulated seconds per wall second: 0.01 s resolution on durations
JSON_KEYS = ("wall_s", "admissions_per_s", "time_to_admit_s", "queue_usage", "finished")


def _setup_django(database_url: str, broker_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["CELERY_BROKER_URL"] = broker_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()


def _ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def load(path: Path) -> dict[str, Any]:
    """The scenario as a dict (JSON with json, YAML with the C loader)."""
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def write_kueue(path: Path, scale: float = 1.0) -> Path:
    """Kueue's baseline scenario (bench/engine.py's generator) as a JSON file."""
    from bench.engine import kueue_scenario

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kueue_scenario(5, 6, scale)))
    return path


def _scaled(data: dict[str, Any], scale: float) -> dict[str, Any]:
    """Keep every k-th workload of each (queue, class), k = 1 / scale (for quick runs)."""
    if scale >= 1.0:
        return data
    step = max(1, round(1 / scale))
    seen: dict[tuple[str, str], int] = defaultdict(int)
    kept = []
    for w in data["workloads"]:
        key = (w["queue"], w.get("priority_class", "training"))
        if seen[key] % step == 0:
            kept.append(w)
        seen[key] += 1
    return {**data, "workloads": kept}


# --- database setup ---------------------------------------------------------------------------

def setup_world(data: dict[str, Any]) -> Any:
    """Empty the scheduling tables and load the scenario's fleet, tree and classes."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from quotas.models import Flavor, Queue, QuotaEntry, Team
    from scheduling.models import Cluster, Node, PriorityClass

    call_command("migrate", verbosity=0, interactive=False)
    with connection.cursor() as cur:
        cur.execute("TRUNCATE scheduling_workloadevent, scheduling_admission, scheduling_podset, "
                    "scheduling_workload RESTART IDENTITY CASCADE")
    Node.objects.all().delete()
    Cluster.objects.all().delete()
    QuotaEntry.objects.all().delete()
    Team.objects.all().delete()
    for q in Queue.objects.order_by("-depth"):
        q.delete()
    Flavor.objects.filter(nodes__isnull=True).delete()

    flavors = {}
    for f in data.get("flavors", []):
        flavors[f["name"]], _ = Flavor.objects.update_or_create(
            name=f["name"], defaults={"gpu_memory_gib": f.get("gpu_memory_gib")})
    for pc in data.get("priority_classes", []):
        PriorityClass.objects.update_or_create(name=pc["name"], defaults={
            "value": pc["value"], "can_preempt": pc.get("can_preempt", False)})
    for c in data["clusters"]:
        cluster = Cluster.objects.create(
            name=c["name"], region=c.get("region", ""), health=c.get("health", 1.0),
            price=Decimal(str(c.get("price", 1))), datasets=c.get("datasets", []),
            backend="simulated", connection={"speedup": SPEEDUP})
        index: dict[str, int] = defaultdict(int)
        for group in c["nodes"]:
            for _ in range(group.get("count", 1)):
                i = index[group["flavor"]]
                index[group["flavor"]] += 1
                Node.objects.create(
                    cluster=cluster, name=f"{c['name']}-{group['flavor']}-{i}",
                    flavor=flavors[group["flavor"]], gpus=group.get("gpus", 0),
                    cpu=Decimal(str(group.get("cpu", 0))),
                    memory_gib=Decimal(str(group.get("memory_gib", 0))),
                    rack=group.get("rack", ""))

    def add(items: list[dict[str, Any]], parent: Queue | None) -> None:
        for item in items:
            q = Queue.objects.create(name=item["name"], parent=parent,
                                     strategy=item.get("strategy", ""))
            for flavor, resources in (item.get("quota") or {}).items():
                for resource, v in resources.items():
                    QuotaEntry.objects.create(
                        queue=q, flavor=flavors[flavor], resource=resource,
                        min=Decimal(str(v.get("min", 0))),
                        max=None if v.get("max") is None else Decimal(str(v["max"])),
                        lendable=None if v.get("lendable") is None
                        else Decimal(str(v["lendable"])))
            add(item.get("children") or [], q)

    add(data["queues"], None)
    user = get_user_model().objects.filter(username="bench").first()
    if user is None:
        user = get_user_model().objects.create_user("bench", is_staff=True, is_superuser=True)
    return user


def leaf_paths() -> dict[str, str]:
    """Scenario leaf name -> queue path (scenario names are unique)."""
    from quotas.models import Queue

    return {q.name: q.path for q in Queue.objects.filter(children__isnull=True)}


# --- workers ----------------------------------------------------------------------------------

def start_workers(n: int, concurrency: int, env: dict[str, str], *, name: str = "bench",
                  loglevel: str = "INFO", logs: Path | None = None) -> list[subprocess.Popen]:
    """n Celery workers, the first with the beat; each logs to `logs`/NAME-worker-I.log
    (default: var/)."""
    celery = str(Path(sys.executable).parent / "celery")
    procs = []
    logs = logs or ROOT / "var"
    logs.mkdir(exist_ok=True)
    for i in range(n):
        cmd = [celery, "-A", "portal", "worker", f"--loglevel={loglevel}",
               f"--concurrency={concurrency}", "-n", f"{name}{i}@%h", "--without-gossip",
               "--without-mingle", "--without-heartbeat"]
        if i == 0:
            cmd += ["-B", "-s", str(logs / f"{name}-beat-schedule")]
        handle = open(logs / f"{name}-worker-{i}.log", "wb")  # noqa: SIM115
        # A session of its own, so stopping it stops its pool and embedded beat too.
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    time.sleep(3.0)
    for p in procs:
        if p.poll() is not None:
            raise SystemExit(f"a worker exited at start; see {logs}/{name}-worker-*.log")
    return procs


def workers_cpu_s(procs: list[subprocess.Popen]) -> float:
    """CPU seconds (user + system, children included) of every process in the workers'
    sessions so far (Linux /proc; 0.0 elsewhere)."""
    sessions = {p.pid for p in procs}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command: state ppid pgrp session ... utime(12) stime(13) cutime cstime
        if int(fields[3]) in sessions:
            total += sum(int(v) for v in fields[11:15])
    return round(total / tick, 2)


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


# --- play -------------------------------------------------------------------------------------

def request_of(w: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """A scenario workload as a submission body (durations scaled for the sped-up cluster)."""
    body: dict[str, Any] = {
        "name": w["name"].lower().replace("_", "-")[:63], "queue": paths[w["queue"]],
        "priority_class": w.get("priority_class", "training"),
        "preemptible": w.get("preemptible", True), "checkpoint": w.get("checkpoint", True),
        "termination_grace_s": int(w.get("termination_grace_s", 30)),
        "pods": [{"count": p.get("count", 1), "flavors": p["flavors"], "gpus": p.get("gpus", 0),
                  "cpu": p.get("cpu", 0), "memory_gib": p.get("memory_gib", 0),
                  **({"gpu_memory_gib": p["gpu_memory_gib"]} if p.get("gpu_memory_gib")
                     else {})}
                 for p in w["pods"]],
    }
    if w.get("duration_s") is not None:
        body["duration_hint_s"] = max(1, round(float(w["duration_s"]) * SPEEDUP))
    for key in ("strategy", "dataset", "topology", "labels"):
        if w.get(key):
            body[key] = w[key]
    return body


# The kinds of `--kinds mixed`, in turn (None: Allot's own request with pods).
MIXED_KINDS = (None, "Job", "JobSet", "PyTorchJob", "RayJob", "TFJob", "VolcanoJob")


def _template(pod: dict[str, Any]) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": str(pod.get("cpu", 0) or 0),
                                "memory": f"{pod.get('memory_gib', 0) or 0}Gi"}
    limits = {"nvidia.com/gpu": str(pod["gpus"])} if pod.get("gpus") else {}
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "ghcr.io/example/bench:1",
        "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]}}


def manifest_of(kind: str, name: str, pod: dict[str, Any]) -> dict[str, Any]:
    """A manifest of `kind` whose pods are `pod["count"]` pods of `pod`'s requests."""
    n, t = int(pod.get("count", 1)), _template(pod)
    meta = {"name": name}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"parallelism": n, "completions": n, "template": t}}
    if kind == "JobSet":
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
                "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                    "spec": {"parallelism": n, "completions": n, "template": t}}}]}}
    if kind == "PyTorchJob":
        specs: dict[str, Any] = {"Master": {"replicas": 1, "template": t}}
        if n > 1:
            specs["Worker"] = {"replicas": n - 1, "template": t}
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                "spec": {"pytorchReplicaSpecs": specs}}
    if kind == "RayJob":
        cluster: dict[str, Any] = {"headGroupSpec": {"template": t}}
        if n > 1:
            cluster["workerGroupSpecs"] = [{"groupName": "w", "replicas": n - 1,
                                            "template": t}]
        return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
                "spec": {"entrypoint": "python train.py", "submissionMode": "HTTPMode",
                         "rayClusterSpec": cluster}}
    if kind == "TFJob":
        return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta,
                "spec": {"tfReplicaSpecs": {"Worker": {"replicas": n, "template": t}}}}
    if kind == "VolcanoJob":
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
                "spec": {"minAvailable": n, "tasks": [{"name": "w", "replicas": n,
                                                       "template": t}]}}
    raise ValueError(f"unknown kind {kind!r}")


def as_manifest(body: dict[str, Any], kind: str | None) -> dict[str, Any]:
    """A submission body as a manifest submission of `kind` (None: unchanged); one pod set."""
    if kind is None or len(body["pods"]) != 1:
        return body
    pod = body.pop("pods")[0]
    body["flavors"] = pod["flavors"]
    body["manifest"] = manifest_of(kind, body["name"], pod)
    return body


def play(data: dict[str, Any], user: Any, *, timeout_s: float,
         kinds: tuple[str | None, ...] = (None,)) -> dict[str, Any]:
    """Submit at the scenario's times; wait until every workload ended; sample usage."""
    from django.db.models import Sum

    from scheduling.enqueue import cycle_nudge
    from scheduling.models import Admission, Workload
    from scheduling.services import workloads_submit

    paths = leaf_paths()
    todo = sorted(data["workloads"], key=lambda w: (float(w.get("submit_at", 0)), w["name"]))
    capacity = 0.0
    for c in data["clusters"]:
        for n in c["nodes"]:
            capacity += n.get("count", 1) * (n.get("gpus", 0) or n.get("cpu", 0))
    key_field = "gpus" if any(n.get("gpus") for c in data["clusters"] for n in c["nodes"]) \
        else "cpu"
    samples: list[float] = []
    start = time.monotonic()
    last_sample = 0.0
    i = 0
    total = len(todo)
    # The kind of each workload: in turn by its order within its queue.
    turn: dict[str, int] = defaultdict(int)
    kind_of: dict[str, str | None] = {}
    for w in todo:
        kind_of[w["name"]] = kinds[turn[w["queue"]] % len(kinds)]
        turn[w["queue"]] += 1
    while True:
        now = time.monotonic() - start
        due = []
        while i < total and float(todo[i].get("submit_at", 0)) <= now:
            due.append(todo[i])
            i += 1
        if due:
            # The submissions due now go in as one batch (the bulk form of workload_submit).
            workloads_submit(user=user, items=[as_manifest(request_of(w, paths),
                                                           kind_of[w["name"]]) for w in due],
                             nudge=False)
            cycle_nudge()
        if now - last_sample >= 1.0:
            last_sample = now
            used = Admission.objects.filter(ended_at__isnull=True).aggregate(
                v=Sum(key_field))["v"] or 0
            samples.append(float(used) / capacity if capacity else 0.0)
            if i >= total and not Workload.objects.filter(
                    state__in=["pending", "reserved", "running", "preempting"]).exists():
                break
            if now > timeout_s:
                print(f"timeout after {timeout_s}s", file=sys.stderr)
                break
        if i < total:
            wait = float(todo[i].get("submit_at", 0)) - (time.monotonic() - start)
            time.sleep(min(max(wait, 0.0), 0.05))
        else:
            time.sleep(0.1)
    return {"samples": samples, "submitted": i}


def measure(play_result: dict[str, Any]) -> dict[str, Any]:
    """The figures, from the database the workers wrote."""
    from django.db.models import Max, Min

    from scheduling.models import Admission, Workload

    first_submit = Workload.objects.aggregate(v=Min("submitted_at"))["v"]
    last_end = Workload.objects.aggregate(v=Max("finished_at"))["v"]
    wall = (last_end - first_submit).total_seconds() if first_submit and last_end else 0.0
    admissions = Admission.objects.count()
    first_adm: dict[int, Any] = {}
    for wid, at in Admission.objects.order_by("reserved_at").values_list("workload_id",
                                                                         "reserved_at"):
        first_adm.setdefault(wid, at)
    waits: dict[str, list[float]] = defaultdict(list)
    for wid, pc, submitted in Workload.objects.values_list("pk", "priority_class__name",
                                                          "submitted_at"):
        if wid in first_adm:
            waits[pc].append((first_adm[wid] - submitted).total_seconds())
    states: dict[str, int] = defaultdict(int)
    for s in Workload.objects.values_list("state", flat=True):
        states[s] += 1
    samples = play_result["samples"]
    return {
        "wall_s": round(wall, 2),
        "admissions_per_s": round(admissions / wall, 1) if wall else 0.0,
        "time_to_admit_s": {k: round(sum(v) / len(v), 3) for k, v in sorted(waits.items())},
        "queue_usage": round(sum(samples) / len(samples), 4) if samples else 0.0,
        "finished": states.get("finished", 0),
        "workloads": play_result["submitted"],
        "admissions": admissions,
        "states": dict(states),
    }


def _kinds_count() -> dict[str, int]:
    """Workloads per kind, as stored (`request`: Allot's own)."""
    from django.db.models import Count

    from scheduling.models import Workload

    return {(row["kind"] or "request"): row["n"] for row in
            Workload.objects.values("kind").annotate(n=Count("id")).order_by("kind")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fullstack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", type=Path, help="scenario file (.json or .yaml)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="processes per worker")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="keep this fraction of each queue's workloads (quick runs)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--kinds", choices=("plain", "mixed"), default="plain",
                        help="submit Allot's own requests, or a mix of manifest kinds")
    parser.add_argument("--write-kueue", type=Path, metavar="FILE",
                        help="write Kueue's baseline scenario to FILE and exit")
    args = parser.parse_args(argv)
    if args.write_kueue:
        write_kueue(args.write_kueue)
        return 0
    path = args.scenario or write_kueue(ROOT / "var" / "kueue-baseline.json")
    database_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    broker_url = os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER)
    _ensure_database(database_url)
    _setup_django(database_url, broker_url)

    from scheduling.replay import ScenarioError, load_scenario

    data = _scaled(load(path), args.scale)
    try:
        load_scenario(data)
    except ScenarioError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    import redis

    redis.Redis.from_url(broker_url).flushdb()
    user = setup_world(data)
    s = data.get("settings") or {}
    env = {k: v for k, v in os.environ.items() if k != "TEST_DATABASE_NAME"}
    env.update({
        "DATABASE_URL": database_url, "CELERY_BROKER_URL": broker_url, "LOG_LEVEL": "INFO",
        "CONN_MAX_AGE": "600",
        "ALLOT_CYCLE_INTERVAL_S": str(s.get("cycle_interval_s", 1.0)),
        # The workers follow the simulated cluster by watch; the periodic sync is the resync.
        "ALLOT_SYNC_INTERVAL_S": "5", "ALLOT_MAX_PENDING_PER_QUEUE": "32",
        "ALLOT_RECLAIM_COOLDOWN_S": str(s.get("reclaim_cooldown_s", 120)),
        "ALLOT_STARVATION_S": str(s.get("starvation_s", 1800)),
        "ALLOT_PODS_READY_TIMEOUT_S": str(s.get("pods_ready_timeout_s", 300)),
        "ALLOT_STRATEGY": str(s.get("strategy", "binpack")),
    })
    procs = start_workers(args.workers, args.concurrency, env)
    cpu_start = workers_cpu_s(procs)
    try:
        result = play(data, user, timeout_s=args.timeout,
                      kinds=MIXED_KINDS if args.kinds == "mixed" else (None,))
        cpu = workers_cpu_s(procs) - cpu_start
    finally:
        stop_workers(procs)
    figures = measure(result)
    figures["workers_cpu_s"] = round(cpu, 1)
    figures["load_avg"] = [round(v, 2) for v in os.getloadavg()]
    figures["scenario"] = data.get("name", path.stem) + (
        " (mixed kinds)" if args.kinds == "mixed" else "")
    figures["kinds"] = _kinds_count()
    if args.json:
        # Exactly the object on stdout; the run's details on stderr.
        print(json.dumps({k: figures[k] for k in JSON_KEYS}))
        print(json.dumps({k: v for k, v in figures.items() if k not in JSON_KEYS}),
              file=sys.stderr)
        return 0
    print(f"scenario {figures['scenario']}: {figures['workloads']} workloads, "
          f"{args.workers} workers x {args.concurrency}")
    print(f"  wall time          {figures['wall_s']} s")
    print(f"  admissions/s       {figures['admissions_per_s']}")
    for cls, avg in figures["time_to_admit_s"].items():
        print(f"  time to admit      {cls}: {avg} s")
    print(f"  average usage      {figures['queue_usage']:.1%} of the fleet")
    print(f"  finished           {figures['finished']} ({figures['states']})")
    print(f"  kinds              {figures['kinds']}")
    print(f"  workers CPU        {figures['workers_cpu_s']} s (load average "
          f"{figures['load_avg'][0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
