"""What following `kubectl scale` of adopted LeaderWorkerSets costs the full sync:
`python -m bench.adopted_scale`.

A Kubernetes cluster (the API double, loopback HTTP) holds BENCH_OBJECTS adopted LWSs (default
100) of 4 groups each, applied through the admission webhook (4 pending workloads each), beside
BENCH_PENDING other pending workloads (default 10,000) in the database. Printed: the median
time of the follow pass (scheduling/fleet/group_scaling.py: one list call, one query of the
open groups) with nothing scaled, and of a pass that follows 10 objects scaled up by one group
and 10 scaled down by one.

Runs on a throwaway PostgreSQL test database (BENCH_ADOPTED_DB, default
test_allot_bench_adopted).
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/allot")
os.environ["BENCH_KINDS_DB"] = os.environ.get("BENCH_ADOPTED_DB", "test_allot_bench_adopted")

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.kinds import NODES, build_fleet  # noqa: E402  (sets Django up)

OBJECTS = int(os.environ.get("BENCH_OBJECTS", "100"))
PENDING = int(os.environ.get("BENCH_PENDING", "10000"))
PLURAL = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


def _lws(name: str) -> dict:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": {"allot.io/queue": "rd.vision"}},
            "spec": {"replicas": 4, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
                "spec": {"containers": [{"name": "main", "image": "vllm/vllm-openai:1",
                                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}


def _review(obj: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "bench", "kind": {"group": PLURAL[0], "version": "v1", "kind": obj["kind"]},
        "namespace": "rd-vision", "operation": "CREATE", "userInfo": {"username": "bench"},
        "object": obj}}


def _pending(user: object) -> None:
    from quotas.models import Queue
    from scheduling.models import PriorityClass, Workload, WorkloadState

    leaf = Queue.objects.get(path="rd/vision")
    klass = PriorityClass.objects.get(name="training")
    now = timezone.now()
    Workload.objects.bulk_create([Workload(
        name=f"other-{i}", queue=leaf, team=leaf.teams.first(), owner=user,
        state=WorkloadState.PENDING, priority_class=klass, submitted_at=now,
        state_changed_at=now) for i in range(PENDING)], batch_size=2000)


def _passes(cluster: object, backend: object, n: int) -> list[float]:
    from scheduling.fleet.group_scaling import adopted_groups_follow

    out = []
    for _ in range(n):
        start = time.perf_counter()
        adopted_groups_follow(cluster=cluster, backend=backend)  # type: ignore[arg-type]
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    from scheduling.admission import admission_review
    from scheduling.backends import clear_backend_cache, registry
    from scheduling.models import Cluster, Workload
    from tests.k8s_double import KubeDouble
    from tests.k8s_double.patches import json_patch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} at start; "
          f"{OBJECTS} adopted LWSs of 4 groups, {PENDING} other pending workloads")
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        with KubeDouble() as kube:
            for i in range(NODES):
                kube.state.add_node(f"c0-n{i}", labels={"allot.io/flavor": "a100-80g"}, gpus=8)
            kube.state.create_namespace({"metadata": {"name": "rd-vision"}})
            user = build_fleet()
            from quotas.models import Queue

            Queue.objects.filter(path="rd/vision").update(namespace="rd-vision")
            cluster = Cluster.objects.get(name="c0")
            cluster.backend, cluster.connection = "kubernetes", {**kube.connection,
                                                                 "timeout_s": 10}
            cluster.save()
            clear_backend_cache()
            backend = registry.get_backend(cluster)
            _pending(user)
            for i in range(OBJECTS):
                obj = _lws(f"vllm-{i}")
                answer = admission_review(cluster=cluster, review=_review(obj))["response"]
                applied = json_patch(obj, json.loads(base64.b64decode(answer["patch"])))
                kube.state.create_object(*PLURAL, "rd-vision", applied)
            groups = Workload.objects.filter(labels__has_key="allot.io/gang").count()
            quiet = _passes(cluster, backend, 20)
            print(f"  follow pass, nothing scaled ({groups} groups open): median "
                  f"{statistics.median(quiet):.1f} ms, p95 {sorted(quiet)[18]:.1f} ms")
            scaled = []
            for run in range(3):
                for i in range(10):
                    kube.state.patch_object(*PLURAL, "rd-vision", f"vllm-{i}", {
                        "spec": {"replicas": 5 + run}}, "application/merge-patch+json")
                    kube.state.patch_object(*PLURAL, "rd-vision", f"vllm-{10 + i}", {
                        "spec": {"replicas": 3 - run}}, "application/merge-patch+json")
                scaled += _passes(cluster, backend, 1)
            print(f"  follow pass, 10 objects +1 group and 10 objects -1 group: median "
                  f"{statistics.median(scaled):.1f} ms (3 runs)")
            clear_backend_cache()
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
