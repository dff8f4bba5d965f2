"""The scenario's workloads: the engine's `WorkloadSpec` plus what only the runner needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.engine import PodSetSpec, PriorityClassSpec, Settings, WorkloadSpec
from scheduling.engine.submission import gpus_problems
from scheduling.replay.checker import STRATEGIES, Checker, label
from scheduling.replay.scenario import SimWorkload

WORKLOAD_KEYS = {"name", "queue", "submit_at", "duration_s", "priority_class", "preemptible",
                 "checkpoint", "termination_grace_s", "strategy", "dataset", "topology",
                 "start_delay_s", "cancel_at", "labels", "pods"}
POD_KEYS = {"count", "flavors", "gpus", "cpu", "memory_gib", "gpu_memory_gib", "resources"}


def parse_workloads(c: Checker, raw: list[Any], flavors: set[str],
                    classes: Mapping[str, PriorityClassSpec], leaves: Mapping[str, str],
                    settings: Settings) -> list[SimWorkload]:
    """The `workloads` list, in file order."""
    out: list[SimWorkload] = []
    seen: set[str] = set()
    for i, w in enumerate(raw):
        where = label(w, f"workloads[{i}]", "workload")
        if not c.keys(w, WORKLOAD_KEYS, {"name", "queue", "pods"}, where):
            continue
        name = c.text(w, "name", where)
        ww = f"workload {name}"
        if not name:
            c.problems.append(f"{where}: empty name")
        elif name in seen:
            c.problems.append(f"{ww}: name used twice")
        seen.add(name)
        queue = c.text(w, "queue", ww)
        if "queue" in w and queue not in leaves:
            c.problems.append(f"{ww}: queue {queue!r} is not a leaf queue of the tree")
        pc_name = c.text(w, "priority_class", ww, "training")
        pc = classes.get(pc_name)
        if pc is None:
            c.problems.append(f"{ww}: unknown priority class {pc_name!r}")
        topo = w.get("topology") or {}
        same = ""
        if c.keys(topo, {"same"}, set(), f"{ww} topology"):
            same = c.text(topo, "same", f"{ww} topology", "", ("rack",))
        labels = w.get("labels") or {}
        if not isinstance(labels, Mapping):
            c.problems.append(f"{ww}: labels must be a mapping")
            labels = {}
        pod_sets = _pod_sets(c, w, ww, flavors)
        spec = WorkloadSpec(
            name=name, queue=leaves.get(queue, queue), pod_sets=tuple(pod_sets),
            submitted_at=c.num(w, "submit_at", ww, 0.0) or 0.0,
            priority=pc.value if pc else 0, priority_class=pc_name,
            can_preempt=pc.can_preempt if pc else False,
            preemptible=c.boolean(w, "preemptible", ww, True),
            checkpoint=c.boolean(w, "checkpoint", ww, True),
            termination_grace_s=c.num(w, "termination_grace_s", ww,
                                      settings.termination_grace_s),
            strategy=c.text(w, "strategy", ww, "", STRATEGIES),
            dataset=c.text(w, "dataset", ww), topology_same=same,
            labels={str(k): str(v) for k, v in labels.items()})
        duration = c.num(w, "duration_s", ww, None)
        cancel = c.num(w, "cancel_at", ww, None)
        if cancel is not None and cancel < spec.submitted_at:
            c.problems.append(f"{ww}: cancel_at {cancel:g} < submit_at {spec.submitted_at:g}")
        out.append(SimWorkload(spec, duration, c.num(w, "start_delay_s", ww, 0.0) or 0.0,
                               cancel))
    return out


def _pod_sets(c: Checker, w: Mapping[str, Any], ww: str, flavors: set[str]) -> list[PodSetSpec]:
    """A workload's `pods` list (`ww` names the workload in problems)."""
    pod_sets: list[PodSetSpec] = []
    raw_pods = c.items(w, "pods", ww)
    if "pods" in w and not raw_pods:
        c.problems.append(f"{ww}: pods is empty")
    for j, ps in enumerate(raw_pods):
        pw = f"{ww} pods[{j}]"
        if not c.keys(ps, POD_KEYS, {"flavors"}, pw):
            continue
        fl = ps.get("flavors")
        if isinstance(fl, str):
            fl = [fl]
        if not isinstance(fl, list) or not fl:
            c.problems.append(f"{pw}: flavors must be a non-empty list")
            fl = []
        for f in fl:
            if f not in flavors:
                c.problems.append(f"{pw}: unknown flavor {f!r}")
        count = c.num(ps, "count", pw, 1.0, lo=1.0, integer=True) or 1.0
        gpus = c.num(ps, "gpus", pw, 0.0) or 0.0
        gpu_mem = c.qty(ps, "gpu_memory_gib", pw, None, "memory")
        c.problems.extend(f"{pw}: {m}" for m in gpus_problems(gpus, gpu_mem))
        pod_sets.append(PodSetSpec(
            count=int(count), flavors=tuple(str(f) for f in fl),
            gpus=gpus if 0 < gpus < 1 else int(gpus),
            cpu=c.qty(ps, "cpu", pw, 0.0, "cpu") or 0.0,
            memory_gib=c.qty(ps, "memory_gib", pw, 0.0, "memory") or 0.0,
            gpu_memory_gib=gpu_mem,
            resources=c.resources(ps, pw)))
    return pod_sets
