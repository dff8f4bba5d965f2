"""Small builders for engine tests: a tree, a fleet, workloads."""

from __future__ import annotations

from scheduling.engine import (
    ClusterSpec,
    Engine,
    FlavorSpec,
    KeyQuota,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    Settings,
    WorkloadSpec,
)

A100 = "a100-80g"
GPU = (A100, "gpu")


def q(path: str, mn: float = 0, mx: float | None = None, lend: float | None = None,
      flavor: str = A100, strategy: str = "") -> QueueSpec:
    parent = path.rsplit("/", 1)[0] if "/" in path else None
    quota = {(flavor, "gpu"): KeyQuota(mn, mx, mn if lend is None else lend)}
    return QueueSpec(path, parent, quota, strategy)


def cluster(name: str = "c", nodes: int = 2, gpus: int = 8, flavor: str = A100,
            rack: str = "", racks: list[str] | None = None, health: float = 1.0,
            price: float = 1.0, datasets: frozenset[str] = frozenset(),
            cpu: float = 96) -> ClusterSpec:
    specs = tuple(
        NodeSpec(f"{name}-{flavor}-{i}", flavor, gpus, cpu, 1024,
                 racks[i] if racks else rack)
        for i in range(nodes))
    return ClusterSpec(name, specs, health=health, price=price, datasets=datasets)


def wl(name: str, queue: str, gpus: int = 8, count: int = 1, t: float = 0.0,
       flavors: tuple[str, ...] = (A100,), cpu: float = 8, **kw: object) -> WorkloadSpec:
    mem = kw.pop("gpu_memory_gib", None)
    pods = (PodSetSpec(count, flavors, gpus, cpu, 64, mem),)  # type: ignore[arg-type]
    return WorkloadSpec(name, queue, pods, submitted_at=t, **kw)  # type: ignore[arg-type]


def engine(queues: list[QueueSpec], clusters: list[ClusterSpec], **settings: object) -> Engine:
    return Engine(queues=queues, clusters=clusters,
                  flavors=(FlavorSpec(A100, 80), FlavorSpec("v100-32g", 32), FlavorSpec("cpu")),
                  settings=Settings(**settings))  # type: ignore[arg-type]


def run(eng: Engine, now: float, *workloads: WorkloadSpec):  # type: ignore[no-untyped-def]
    """Submit, run one cycle, mark admissions running; return the cycle's result."""
    for w in workloads:
        eng.submit(w)
    res = eng.cycle(now)
    for a in res.admitted:
        eng.mark_running(a.workload)
    return res
