"""The engine's snapshot of the database: what one cycle reads, and what it keeps between
cycles.

Engine names are workload primary keys as strings; times are POSIX seconds. What never changes
after submission is read once per process and kept; what the workers change is read every
cycle.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings

from core import changes, db
from core.quantity import amounts, equivalents
from quotas.models import Flavor, Queue
from scheduling import engine, extensions
from scheduling.backends.naming import LABEL_PINNED_CLUSTER
from scheduling.engine.forecast import repeated
from scheduling.models import (
    ACTIVE_STATES,
    UNCONFIRMED_END_REASONS,
    Admission,
    Cluster,
    EventType,
    Node,
    PodSet,
    PriorityClass,
    Workload,
    WorkloadEvent,
    WorkloadState,
)
from scheduling.workers.rows import (
    SnapshotParts,
    _f,
    _live_rows,
    _nominated,
    _pending_heads,
    max_pending_per_queue,
)

logger = logging.getLogger(__name__)
S = WorkloadState


def ts(value: datetime | None) -> float | None:
    """A datetime as POSIX seconds (the engine's clock)."""
    return value.timestamp() if value is not None else None


def dt(value: float) -> datetime:
    """POSIX seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(value, tz=UTC)


def engine_settings() -> engine.Settings:
    """The engine settings from settings.ALLOT_ENGINE (unknown keys ignored)."""
    known = set(engine.Settings.__dataclass_fields__)
    values = {k: v for k, v in settings.ALLOT_ENGINE.items() if k in known}
    return engine.Settings(**values)


def build_snapshot(now: datetime, *, pending_limit: int | None = None, record: bool = True
                   ) -> tuple[engine.Snapshot, SnapshotParts]:
    """Read the tree, the fleet, admitted and pending work; let adjusters narrow it.
    `pending_limit`: pending workloads per leaf (default `max_pending_per_queue`; the start
    forecast reads them all); `record` False: for a forecast (adjusters record nothing)."""
    parts = SnapshotParts()
    eng_settings = engine_settings()
    specs, report = _tree()
    queue_rows = list(Queue.objects.values_list("id", "path", "namespace", "strategy"))
    strategies = {path: strategy for _, path, _, strategy in queue_rows}
    queue_paths = {pk: (path, namespace) for pk, path, namespace, _ in queue_rows}
    clusters, flavor_rows, nodes_by_cluster = _fleet(parts)
    flavor_name = {f["id"]: f["name"] for f in flavor_rows}
    priorities = {p.pk: p for p in PriorityClass.objects.all()}
    parts.priority_names = {pk: p.name for pk, p in priorities.items()}

    # Pending work enters the cycle up to `max_pending_per_queue` per leaf, in the leaf's own
    # order (priority, then submission): the cycle's cost stays bounded by queues x that
    # number however long the queues grow (Kueue looks at one head per queue per cycle).
    pending_ids = _pending_heads(pending_limit or max_pending_per_queue(), now)
    pending_ids += sorted(set(_nominated(now)) - set(pending_ids))
    active_ids = list(Workload.objects.filter(state__in=ACTIVE_STATES, needs_approval=False)
                      .values_list("id", flat=True))
    live = _live_rows(pending_ids + active_ids, parts, queue_paths)
    pending_rows = [r for r in live if r["state"] == S.PENDING]
    active_rows = [r for r in live if r["state"] in ACTIVE_STATES]
    live = pending_rows + active_rows
    live.sort(key=lambda r: (r["submitted_at"], r["id"]))
    open_adm = {a.workload_id: a for a in Admission.objects.filter(
        ended_at__isnull=True,
        workload_id__in=db.in_array([r["id"] for r in active_rows], "bigint"))}

    ctx = _cycle_context(now, specs, report, clusters, pending_rows, priorities, parts, record)
    queues = [engine.QueueSpec(path=path, parent=spec.parent,
                               quota=_quota(path, report, ctx),
                               strategy=strategies.get(path, "") or "")
              for path, spec in specs.items()]

    pending: list[engine.WorkloadSpec] = []
    admitted: list[engine.AdmittedWorkload] = []
    waiting: dict[str, list[str]] = defaultdict(list)
    nominations: dict[str, engine.Nomination] = {}
    cluster_by_id = {c.pk: c for c in clusters}
    for r in live:
        parts.rows[str(r["id"])] = r
        if r["state"] == S.PENDING:
            pending.append(_workload_spec(r, priorities, ctx, parts))
            if r["nomination"]:
                nominations[str(r["id"])] = nomination_from_json(r["nomination"])
            continue
        adm = open_adm.get(r["id"])
        if adm is None:
            logger.error("workload %s is %s without an open admission; left out of the cycle",
                         r["id"], r["state"])
            continue
        parts.admissions[str(r["id"])] = adm
        cluster = cluster_by_id.get(adm.cluster_id)
        preempting = r["state"] == S.PREEMPTING
        if preempting and r["preempted_by_id"]:
            waiting[str(r["preempted_by_id"])].append(str(r["id"]))
        admitted.append(engine.AdmittedWorkload(
            workload=_workload_spec(r, priorities, ctx, parts),
            cluster=cluster.name if cluster else str(adm.cluster_id),
            flavor=flavor_name[adm.flavor_id], nodes=tuple(adm.nodes), borrowed=adm.borrowed,
            cards=tuple(adm.cards or ()),
            admitted_at=adm.reserved_at.timestamp(),
            running=adm.running_at is not None, admission_seq=adm.pk,
            grace_until=ts(r["preempt_deadline"]) if preempting else None,
            # (The column keeps the last preemptor after the victim is requeued.)
            preempted_by=str(r["preempted_by_id"] or "") if preempting else "",
        ))

    cluster_specs = tuple(
        engine.ClusterSpec(
            name=c.name, nodes=tuple(nodes_by_cluster.get(c.pk, ())), region=c.region,
            health=c.effective_health(now), price=float(c.price),
            datasets=frozenset(c.datasets or ()))
        for c in clusters
    )
    held, unreleased = _held({c.pk: c.name for c in clusters})
    snapshot = engine.Snapshot(
        now=now.timestamp(), queues=tuple(queues), clusters=cluster_specs,
        flavors=tuple(engine.FlavorSpec(name=f["name"], gpu_memory_gib=f["gpu_memory_gib"],
                                        gpu_equivalents=equivalents(f["gpu_equivalents"]))
                      for f in flavor_rows),
        pending=tuple(pending), admitted=tuple(admitted), settings=eng_settings,
        repayment=_repayment(now, eng_settings), cooldowns=_cooldowns(now, eng_settings),
        waiting={k: tuple(v) for k, v in waiting.items()},
        held=held, unreleased=unreleased,
        nominations=nominations,
    )
    return snapshot, parts


def nomination_json(nom: engine.Nomination) -> dict[str, Any]:
    """A nomination as stored on its preemptor (`Workload.nomination`)."""
    return {"flavor": nom.flavor, "at": nom.at, "victims": [
        {"name": v.name, "queue": v.queue, "cluster": v.cluster, "nodes": list(v.nodes),
         "pods": [list(p) for p in v.pods]} for v in nom.victims]}


def _victim_pod(p: list[Any]) -> tuple[Any, ...]:
    """A nominated victim's pod from JSON: GPUs (whole cards as int), CPU, memory, then for a
    fraction its slice and card, and its extended resources as (name, amount) pairs."""
    g = int(p[0]) if float(p[0]) >= 1 or float(p[0]) == 0 else float(p[0])
    numbers = tuple(float(x) for x in p[1:5])
    if len(p) > 5:
        return (g, *numbers, tuple((str(r[0]), float(r[1])) for r in p[5]))
    return (g, *numbers)


def nomination_from_json(data: dict[str, Any]) -> engine.Nomination:
    """The stored nomination as the engine takes it."""
    return engine.Nomination(
        flavor=str(data["flavor"]), at=float(data["at"]), victims=tuple(
            engine.NominatedVictim(
                name=str(v["name"]), queue=str(v["queue"]), cluster=str(v["cluster"]),
                nodes=tuple(str(n) for n in v["nodes"]),
                pods=tuple(_victim_pod(p) for p in v["pods"]))
            for v in data["victims"]))


def _tree() -> tuple[dict[str, Any], Any]:
    """The stored quota tree and its resolved quotas; a broken tree stops the cycle.

    Kept per process until the change log says the configuration changed (core/changes.py):
    a tree of a few hundred queues cost each cycle 10-20 ms to read and resolve again."""
    view = changes.validate()
    if view is None:
        return _read_tree()
    return view.derive(("cycle tree",), frozenset({"config"}), _read_tree)


def _read_tree() -> tuple[dict[str, Any], Any]:
    from quotas.selectors import tree_specs
    from quotas.tree_rules import validate_tree

    specs = tree_specs()
    report = validate_tree(specs.values())
    if report.errors:
        # A stored tree is validated on every change; if it is broken anyway, refuse to
        # schedule on it rather than guess.
        raise RuntimeError("the stored queue tree breaks its rules: "
                           + "; ".join(p.message for p in report.errors))
    return specs, report


def _fleet(parts: SnapshotParts) -> tuple[list[Cluster], list[dict[str, Any]],
                                          dict[int, list[engine.NodeSpec]]]:
    """The enabled clusters, the flavors and every node, by cluster."""
    clusters = list(Cluster.objects.filter(enabled=True).order_by("name"))
    parts.clusters = {c.name: c for c in clusters}
    flavor_rows: list[dict[str, Any]] = [
        dict(f) for f in Flavor.objects.values("id", "name", "gpu_memory_gib", "node_selector",
                                               "gpu_equivalents")]
    parts.flavors = {f["name"]: f["id"] for f in flavor_rows}
    parts.node_selectors = {f["name"]: dict(f["node_selector"] or {}) for f in flavor_rows}
    parts.card_memory = {f["name"]: f["gpu_memory_gib"] for f in flavor_rows}
    flavor_name = {f["id"]: f["name"] for f in flavor_rows}
    nodes_by_cluster: dict[int, list[engine.NodeSpec]] = defaultdict(list)
    for n in Node.objects.filter(cluster__in=clusters).order_by("cluster_id", "name").values(
        "cluster_id", "name", "flavor_id", "gpus", "cpu", "memory_gib", "rack", "ready",
        "resources"
    ):
        nodes_by_cluster[n["cluster_id"]].append(engine.NodeSpec(
            name=n["name"], flavor=flavor_name[n["flavor_id"]], gpus=n["gpus"],
            cpu=_f(n["cpu"]), memory_gib=_f(n["memory_gib"]), rack=n["rack"],
            ready=n["ready"], resources=engine.resources_of(amounts(n["resources"]))))
    return clusters, flavor_rows, nodes_by_cluster


def _cycle_context(now: datetime, specs: dict[str, Any], report: Any, clusters: list[Cluster],
                   pending_rows: list[dict[str, Any]], priorities: dict[int, PriorityClass],
                   parts: SnapshotParts, record: bool = True) -> extensions.CycleContext:
    """What the cycle adjusters see, after they have lowered maxima and narrowed clusters."""
    ctx = extensions.CycleContext(
        now=now, queue_paths=list(specs), clusters=[c.name for c in clusters], record=record,
        pending=[
            extensions.PendingInfo(
                id=r["id"], name=r["name"], queue_path=r["queue__path"], team=r["team__name"],
                owner=r["owner__username"],
                priority_class=priorities[r["priority_class_id"]].name, labels=r["labels"],
                dataset=r["dataset"],
                gpus=sum(p["count"] * p["gpus"] for p in parts.pod_sets.get(r["id"], [])),
                flavors=tuple((parts.pod_sets.get(r["id"]) or [{"flavors": []}])[0]["flavors"]),
            )
            for r in pending_rows
        ],
    )
    for path, keys in report.resolved.items():
        for key, res in keys.items():
            ctx.quota_max[(path, f"{key[0]}/{key[1]}")] = (
                None if res.max is None else float(res.max))
    extensions.run_cycle_adjusters(ctx)
    parts.context = ctx
    return ctx


def _quota(path: str, report: Any, ctx: extensions.CycleContext
           ) -> dict[tuple[str, str], engine.KeyQuota]:
    """One queue's resolved quota per key, with the maxima the adjusters lowered."""
    quota = {}
    for key, res in report.resolved.get(path, {}).items():
        kn = f"{key[0]}/{key[1]}"
        quota[key] = engine.KeyQuota(
            min=float(res.min), max=ctx.quota_max.get((path, kn)),
            lendable=float(res.lendable), max_policy=ctx.max_policy.get((path, kn)))
    return quota


def _workload_spec(r: dict[str, Any], priorities: dict[int, PriorityClass],
                   ctx: extensions.CycleContext, parts: SnapshotParts) -> engine.WorkloadSpec:
    """A workload's row as the engine takes it."""
    pc = priorities[r["priority_class_id"]]
    allowed = ctx.allowed_clusters.get(r["id"])
    pinned = (r["labels"] or {}).get(LABEL_PINNED_CLUSTER)
    if pinned:  # adopted from that cluster (the admission webhook): it runs there or nowhere
        allowed = {pinned} if allowed is None else set(allowed) & {pinned}
    return engine.WorkloadSpec(
        name=str(r["id"]), queue=r["queue__path"], display_name=r["name"],
        pod_sets=parts.pod_set_specs.get(r["id"], ()),
        submitted_at=r["submitted_at"].timestamp(), priority=pc.value,
        priority_class=pc.name, can_preempt=pc.can_preempt, preemptible=r["preemptible"],
        checkpoint=r["checkpoint"], termination_grace_s=float(r["termination_grace_s"]),
        strategy=r["strategy"], dataset=r["dataset"],
        topology_same=str((r["topology"] or {}).get("same", "")),
        labels={str(k): str(v) for k, v in (r["labels"] or {}).items()},
        allowed_clusters=frozenset(allowed) if allowed is not None else None,
        allowed_policy=ctx.cluster_reasons.get(r["id"], ""),
        not_before=ts(r["not_before"]), backoff_count=r["backoff_count"],
    )


def _held(cluster_names: dict[int, str]
          ) -> tuple[tuple[engine.HeldCapacity, ...], frozenset[str]]:
    """Node capacity the cluster has not confirmed released: admissions that were dispatched,
    ended by the portal (cancelled, requeued: pods may still run) and whose delete is not
    confirmed yet (`cleaned_at`), per node, and their workloads. Their quota is free; their
    nodes are not."""
    rows = list(Admission.objects.filter(
        ended_at__isnull=False, cleaned_at__isnull=True, dispatched_at__isnull=False,
        end_reason__in=UNCONFIRMED_END_REASONS, cluster_id__in=list(cluster_names))
        .values_list("workload_id", "cluster_id", "nodes", "gpus", "cpu", "memory_gib",
                     "cards"))
    if not rows:
        return (), frozenset()
    # Per pod: whole cards, cpu, memory, then a fraction's share and slice, and its extended
    # resources (engine amounts).
    HeldPod = tuple[int, float, float, float, float, dict[str, Decimal]]
    sets: dict[int, list[HeldPod]] = defaultdict(list)
    for wid, count, gpus, cpu, mem, gmem, resources in PodSet.objects.filter(
            workload_id__in={r[0] for r in rows}).order_by("workload_id", "index").values_list(
            "workload_id", "count", "gpus", "cpu", "memory_gib", "gpu_memory_gib", "resources"):
        frac = _f(gpus) if 0 < gpus < 1 else 0.0
        sets[wid] += [(int(gpus) if gpus >= 1 else 0, _f(cpu), _f(mem), frac,
                       float(gmem) if frac and gmem is not None else -1.0,
                       amounts(resources))] * count
    held: dict[tuple[str, str], list[Any]] = {}
    for wid, cid, nodes, gpus, cpu, mem, cards in rows:
        pods = sets.get(wid, [])
        if len(pods) != len(nodes) or abs(sum(p[0] + p[3] for p in pods) - _f(gpus)) > 1e-6:
            # Pod sets changed since (a requeued workload edited): split the interval's own
            # totals evenly over its pods (whole cards; no fraction nor resource to name).
            n = max(1, len(nodes))
            pods = [(int(gpus) // n, _f(cpu) / n, _f(mem) / n, 0.0, -1.0, {})] * len(nodes)
        cards = cards if isinstance(cards, list) and len(cards) == len(nodes) else []
        for k, (node, (g, c, m, frac, slice_gib, ext)) in enumerate(zip(nodes, pods, strict=False)):
            acc = held.setdefault((cluster_names[cid], node), [0, 0.0, 0.0, [], {}])
            acc[0] += g
            acc[1] += c
            acc[2] += m
            if frac:
                card = cards[k] if k < len(cards) and isinstance(cards[k], int) else -1
                acc[3].append((frac, slice_gib, card))
            for name, amount in ext.items():
                acc[4][name] = acc[4].get(name, Decimal(0)) + amount
    return (tuple(engine.HeldCapacity(cluster=c, node=n, gpus=int(g), cpu=cpu, memory_gib=m,
                                      fractions=tuple(fr),
                                      resources=engine.resources_of(ext))
                  for (c, n), (g, cpu, m, fr, ext) in sorted(held.items())),
            frozenset(str(r[0]) for r in rows))


def _repayment(now: datetime, s: engine.Settings) -> tuple[engine.RepaymentRecord, ...]:
    since = now - timedelta(seconds=s.repayment_window_s)
    rows = Admission.objects.filter(borrowed=True, ended_at__gte=since).values_list(
        "workload__queue__path", "ended_at", "forced")
    return tuple(engine.RepaymentRecord(queue=q, ended_at=e.timestamp(), forced=f)
                 for q, e, f in rows if e is not None)


def _cooldowns(now: datetime, s: engine.Settings) -> dict[str, float]:
    """Leaf -> end of its reclaim cooldown, from the reclaim decisions' events."""
    since = now - timedelta(seconds=s.reclaim_cooldown_s)
    out: dict[str, float] = {}
    for path, at in WorkloadEvent.objects.filter(
        type=EventType.PREEMPTED, at__gte=since, payload__kind="reclaim"
    ).values_list("workload__queue__path", "at"):
        out[path] = max(out.get(path, 0.0), at.timestamp() + s.reclaim_cooldown_s)
    return out


def arrival_specs(now: datetime, window_s: float, parts: SnapshotParts, *, limit: int,
                  repeat: int = 1
                  ) -> tuple[list[engine.WorkloadSpec], dict[str, float | None]]:
    """The coming demand taken to be the recent past's (docs/engine.md §13, "Future
    arrivals"): the workloads submitted in the last `window_s` (at most the `limit` newest;
    rejected ones and requests awaiting approval left out), each again `repeat` times
    (`forecast.repeated`: the k-th copy named `~<id>` with k tildes, k x `window_s` later).
    With each copy's duration hint (None: none). `parts`: the forecast's snapshot
    parts (its cycle context narrows a copy's clusters as the original's)."""
    if window_s <= 0 or limit <= 0 or repeat <= 0:
        return [], {}
    ids = list(Workload.objects.filter(
        submitted_at__gt=now - timedelta(seconds=window_s), submitted_at__lte=now,
        needs_approval=False).exclude(state=S.REJECTED)
        .order_by("-submitted_at", "-id").values_list("id", flat=True)[:limit])
    if not ids:
        return [], {}
    queue_paths = {pk: (path, ns) for pk, path, ns in
                   Queue.objects.values_list("id", "path", "namespace")}
    priorities = {p.pk: p for p in PriorityClass.objects.all()}
    own = SnapshotParts(context=parts.context)
    ctx = parts.context or extensions.CycleContext(now=now, queue_paths=[], clusters=[],
                                                  pending=[])
    rows = _live_rows(ids, own, queue_paths)
    hint = {str(r["id"]): None if r.get("duration_hint_s") is None
            else float(r["duration_hint_s"]) for r in rows}
    copies = repeated([_workload_spec(r, priorities, ctx, own) for r in rows], window_s, repeat)
    return [copy for copy, _ in copies], {copy.name: hint[of] for copy, of in copies}
