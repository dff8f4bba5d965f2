"""Workload-kind figures: `python -m bench.kinds`.

1. API latency (p50/p95, in-process through Django's test client, DEBUG off) of
   `POST /api/v1/workloads` with a plain one-pod request (the baseline), a PyTorchJob
   (Master + 7 Workers), a JobSet of one replicated Job with 1,000 replicas (1,000 pods of one
   GPU) and a LeaderWorkerSet of 100 groups of 8 (100 leaders and 700 workers of one GPU),
   each accepted pending on a fleet of 1,280 GPUs.
2. The pod-set derivation alone of the same manifests (scheduling.kinds).
3. A LeaderWorkerSet of 100 groups of 8 is 100 workloads, one gang per group: the API
   latency of submitting it (the 201 lists the 100 groups) and the scheduling cycle that
   admits it on a quota with room for 60 groups (480 GPUs): cycle time, groups admitted,
   the others' reason; then the next cycle (nothing new to admit).
4. Creating the JobSet and the LeaderWorkerSet on a Kubernetes cluster (the backend against
   the API double, loopback HTTP): the object with its placement for 1,000 pods (an LWS group
   is one object of one group since each group is a workload: its figure is that of 8 pods).

Runs on a throwaway PostgreSQL test database (BENCH_KINDS_DB, default
test_allot_bench_kinds). BENCH_N: submissions per shape (default 40).
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
os.environ["TEST_DATABASE_NAME"] = os.environ.get("BENCH_KINDS_DB", "test_allot_bench_kinds")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

settings.DEBUG = False
N = int(os.environ.get("BENCH_N", "40"))
NODES = 160


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn: Callable[[int], Any], n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def _container(gpus: int, cpu: str = "4", memory: str = "32Gi") -> dict[str, Any]:
    return {"name": "main", "image": "ghcr.io/example/train:1",
            "resources": {"requests": {"cpu": cpu, "memory": memory},
                          "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}


def _template(gpus: int) -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [_container(gpus)]}}


def manifests() -> dict[str, dict[str, Any]]:
    return {
        "PyTorchJob 1+7 x 8 GPUs": {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": _template(8)},
                "Worker": {"replicas": 7, "template": _template(8)}}}},
        "JobSet 1,000 replicas": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "big-jobset"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1000, "template": {
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                         "template": _template(1)}}}]}},
        "LWS 100 groups of 8": {
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "big-lws"},
            "spec": {"replicas": 100, "leaderWorkerTemplate": {
                "size": 8, "workerTemplate": _template(1)}}},
    }


def build_fleet() -> Any:
    from django.contrib.auth import get_user_model

    from quotas.models import Flavor, Queue, QuotaEntry, Team
    from scheduling.models import Cluster, Node, PriorityClass

    a100 = Flavor.objects.create(name="a100-80g", gpu_memory_gib=80,
                                 node_selector={"allot.io/flavor": "a100-80g"})
    PriorityClass.objects.get_or_create(name="training", defaults={"value": 1000})
    cluster = Cluster.objects.create(name="c0", region="east")
    Node.objects.bulk_create([
        Node(cluster=cluster, name=f"c0-n{i}", flavor=a100, gpus=8, cpu=Decimal(96),
             memory_gib=Decimal(1024)) for i in range(NODES)])
    root = Queue.objects.create(name="rd")
    QuotaEntry.objects.create(queue=root, flavor=a100, min=Decimal(0), max=Decimal(4096))
    leaf = Queue(parent=root, name="vision")
    leaf.path, leaf.depth = leaf.compute_path()
    leaf.save()
    user = get_user_model().objects.create_user("bench", password="x")
    team = Team.objects.create(name="bench")
    team.queues.add(leaf)
    from quotas.models import TeamMembership, TeamRole
    TeamMembership.objects.create(team=team, user=user, role=TeamRole.RESEARCHER)
    return user


def _manifest_shape(prefix: str, obj: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    return lambda i: {"name": f"{prefix}-{i}", "queue": "rd/vision",
                      "manifest": copy.deepcopy(obj)}


def api_figures(user: Any) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    shapes: dict[str, Callable[[int], dict[str, Any]]] = {
        "plain request, 1 pod": lambda i: {
            "name": f"plain-{i}", "queue": "rd/vision",
            "pods": [{"count": 1, "flavors": ["a100-80g"], "gpus": 1}]},
    }
    for n, (label, obj) in enumerate(manifests().items()):
        shapes[label] = _manifest_shape(f"k{n}", obj)
    print(f"POST /api/v1/workloads, {N} submissions each (p50 / p95 ms):")
    for label, make in shapes.items():
        states: set[str] = set()

        def post(i: int, make: Callable[[int], dict[str, Any]] = make,
                 states: set[str] = states) -> None:
            resp = client.post("/api/v1/workloads", make(i), format="json")
            assert resp.status_code == 201, resp.content[:500]
            states.add(resp.json()["state"])

        post(10_000)  # warm
        times = timed(post, N)
        print(f"  {label:28s} {statistics.median(times):7.1f} / {pct(times, 0.95):7.1f}"
              f"   ({', '.join(sorted(states))})")


def lws_cycle_figures(user: Any, runs: int = 3) -> None:
    from rest_framework.test import APIClient

    from quotas.models import QuotaEntry
    from scheduling.models import Workload
    from scheduling.workers.cycle import cycle_run

    client = APIClient()
    client.force_authenticate(user)
    obj = manifests()["LWS 100 groups of 8"]
    QuotaEntry.objects.filter(queue__name="rd").update(max=Decimal(480))  # 60 groups of 8
    post_ms, cycle_ms, idle_ms, outcome = [], [], [], ""
    for run in range(runs):
        Workload.objects.all().delete()
        cycle_run(wait=True)  # an empty cycle first: the next one is the LWS's alone
        start = time.perf_counter()
        resp = client.post("/api/v1/workloads", {"queue": "rd/vision", "manifest": obj,
                                                 "name": f"lws{run}"}, format="json")
        post_ms.append((time.perf_counter() - start) * 1000)
        assert resp.status_code == 201 and len(resp.json()["gangs"]) == 100, resp.content[:300]
        start = time.perf_counter()
        cycle_run(wait=True)
        cycle_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        cycle_run(wait=True)
        idle_ms.append((time.perf_counter() - start) * 1000)
        groups = Workload.objects.filter(name__startswith=f"lws{run}-")
        states: dict[str, int] = {}
        for state in groups.values_list("state", flat=True):
            states[state] = states.get(state, 0) + 1
        reasons = sorted(set(groups.filter(state="pending").values_list("reason_code",
                                                                        flat=True)))
        outcome = f"{states}, waiting: {', '.join(reasons) or '-'}"
    print(f"LWS 100 groups of 8 on a quota of 60 groups, {runs} runs (median ms):")
    print(f"  POST (100 workloads)          {statistics.median(post_ms):7.1f}")
    print(f"  cycle admitting it            {statistics.median(cycle_ms):7.1f}   ({outcome})")
    print(f"  next cycle                    {statistics.median(idle_ms):7.1f}")


def derivation_figures() -> None:
    from scheduling import kinds

    print(f"pod-set derivation alone, {N} runs (p50 / p95 ms):")
    for label, obj in manifests().items():
        kind = kinds.kind_of(obj)
        times = timed(lambda _i, kind=kind, obj=obj: kind.derive(obj), N)
        print(f"  {label:28s} {statistics.median(times):7.2f} / {pct(times, 0.95):7.2f}")


def dispatch_figures() -> None:
    from scheduling import kinds
    from scheduling.backends import PodSetSpec, WorkloadSpec
    from scheduling.backends.k8s import KubernetesBackend
    from tests.k8s_double import KubeDouble

    print("create on a Kubernetes cluster (API double on loopback), 3 runs (median ms):")
    with KubeDouble() as kube:
        for i in range(NODES):
            kube.state.add_node(f"c0-n{i}", labels={"allot.io/flavor": "a100-80g"}, gpus=8)
        backend = KubernetesBackend(name="c0", connection=kube.connection)
        for label, obj in manifests().items():
            if label.startswith("PyTorchJob"):
                continue
            kind = kinds.kind_of(obj)
            gangs = kind.gangs(obj)  # an LWS: one object per group, each its own workload
            sets = kind.derive(gangs[0])
            pod_sets = tuple(PodSetSpec(
                index=i, count=s.count, flavor="a100-80g", gpus=s.gpus, cpu=s.cpu,
                memory_gib=s.memory_gib, node_selector={"allot.io/flavor": "a100-80g"},
                nodes=tuple(f"c0-n{k % NODES}" for k in range(s.count)))
                for i, s in enumerate(sets))
            runs = []
            for n in range(3):
                start = time.perf_counter()
                for g, gang in enumerate(gangs):
                    spec = WorkloadSpec(workload_id=1000 * (n + 1) + g, name="bench",
                                        namespace="rd-vision", queue_path="rd/vision",
                                        pod_sets=pod_sets, kind=kind.key, manifest=gang)
                    backend.create_workload(spec)
                runs.append((time.perf_counter() - start) * 1000)
            what = f"({len(gangs)} objects)" if len(gangs) > 1 else ""
            print(f"  {label:28s} {statistics.median(runs):7.1f}   {what}")


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start; database: "
          f"{connection.vendor}")
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        user = build_fleet()
        api_figures(user)
        derivation_figures()
        lws_cycle_figures(user)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    dispatch_figures()


if __name__ == "__main__":
    main()
